// Package docs holds the coordinator's API description, embedded so the server
// can serve the same bytes the repository documents (GET /coord/v1/openapi.yaml).
//
// It must not import anything from this module: httpapi imports it.
package docs

import _ "embed"

// OpenAPI is docs/openapi.yaml: an OpenAPI 3.0.3 description of every route the
// coordinator serves.
//
//go:embed openapi.yaml
var OpenAPI []byte
