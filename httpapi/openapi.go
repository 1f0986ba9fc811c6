package httpapi

import (
	"net/http"

	"github.com/rscoord/rsc/docs"
)

func (s *Server) registerOpenAPIRoute() {
	s.router.HandleFunc("/coord/v1/openapi.yaml", handleOpenAPI).Methods(http.MethodGet)
}

// handleOpenAPI serves GET /coord/v1/openapi.yaml: docs/openapi.yaml as embedded
// at build time, so the description always matches the binary answering it.
func handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(docs.OpenAPI)
}
