package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"go.yaml.in/yaml/v3"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/docs"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/wire"
)

// openAPIMountedOnly lists documented routes the router built by NewServer alone may not
// have, because cmd/coordinator adds them through Config.Mount. They are allowed
// to be missing from the walked router; when they are present they are checked
// like every other route.
var openAPIMountedOnly = map[string]string{
	"GET /metrics": "metrics.Mount, wired by cmd/coordinator (Config.Mount)",
	// The console is registered by NewServer today; it may move to cmd's Mount.
	"GET /console":         "console, may be mounted by cmd/coordinator",
	"HEAD /console":        "console, may be mounted by cmd/coordinator",
	"GET /console/{path}":  "console, may be mounted by cmd/coordinator",
	"HEAD /console/{path}": "console, may be mounted by cmd/coordinator",
}

// apiSpec is the parsed OpenAPI document.
type apiSpec struct {
	root map[string]any
}

func mustLoadSpec(tb testing.TB) *apiSpec {
	tb.Helper()
	var root map[string]any
	if err := yaml.Unmarshal(docs.OpenAPI, &root); err != nil {
		tb.Fatalf("parse docs/openapi.yaml: %v", err)
	}
	if v, _ := root["openapi"].(string); v != "3.0.3" {
		tb.Fatalf("openapi version = %q, want 3.0.3", v)
	}
	return &apiSpec{root: root}
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func (s *apiSpec) paths() map[string]any { return asMap(s.root["paths"]) }

func (s *apiSpec) schema(name string) map[string]any {
	return asMap(asMap(asMap(s.root["components"])["schemas"])[name])
}

// deref follows a local $ref ("#/components/...").
func (s *apiSpec) deref(v map[string]any) map[string]any {
	for v != nil {
		ref, ok := v["$ref"].(string)
		if !ok {
			return v
		}
		var cur any = s.root
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cur = asMap(cur)[part]
		}
		v = asMap(cur)
	}
	return v
}

var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// operations returns "METHOD /normalized/path" -> operation.
func (s *apiSpec) operations() map[string]map[string]any {
	out := map[string]map[string]any{}
	for p, item := range s.paths() {
		for _, m := range openAPIMethods {
			if op := asMap(asMap(item)[m]); op != nil {
				out[strings.ToUpper(m)+" "+normalizeTemplate(p)] = op
			}
		}
	}
	return out
}

var templateParamRE = regexp.MustCompile(`\{([^{}:]+)(:[^{}]*)?\}`)

// normalizeTemplate keeps parameter names but drops mux patterns ({path:.*} -> {path}).
func normalizeTemplate(p string) string { return templateParamRE.ReplaceAllString(p, "{$1}") }

// pathShape drops parameter names too, for comparing shapes.
func pathShape(p string) string { return templateParamRE.ReplaceAllString(p, "{}") }

func newDocServer(tb testing.TB, auth httpapi.AuthConfig) (*httpapi.Server, *coordinator.Coordinator) {
	tb.Helper()
	c := coordinator.New(coordinator.Config{DisableProvisioning: true}, events.NewMemLog(), nil, nil, nil)
	if err := c.Load(context.Background(), false); err != nil {
		tb.Fatal(err)
	}
	c.Run()
	tb.Cleanup(c.Close)
	auth.AuthenticateMemberAPI = true // as the coordinator binary by default
	return httpapi.NewServer(httpapi.Config{Addr: "127.0.0.1:0", Auth: auth}, httpapi.PartsOf(c), nil), c
}

// walkRoutes walks the router: "METHOD /path/{}" -> the template as registered.
func walkRoutes(tb testing.TB, r *mux.Router) map[string]string {
	tb.Helper()
	out := map[string]string{}
	err := r.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := route.GetPathTemplate()
		if err != nil {
			return nil // a route without a path (matcher only) has nothing to document
		}
		shape := tpl
		if re, err := route.GetPathRegexp(); err == nil && !strings.HasSuffix(re, "$") {
			// A PathPrefix route serves everything below it: one parameter.
			shape = strings.TrimSuffix(tpl, "/") + "/{rest}"
		}
		methods, err := route.GetMethods()
		if err != nil || len(methods) == 0 {
			tb.Errorf("route %s accepts every method; register it with Methods(...) so it can be documented", tpl)
			return nil
		}
		for _, m := range methods {
			out[m+" "+pathShape(shape)] = tpl
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	sp := mustLoadSpec(t)
	s, _ := newDocServer(t, httpapi.AuthConfig{})
	routes := walkRoutes(t, s.Router())
	documented := map[string]string{}
	for key := range sp.operations() {
		method, p, _ := strings.Cut(key, " ")
		documented[method+" "+pathShape(p)] = key
	}
	var missing []string
	for key, tpl := range routes {
		if _, ok := documented[key]; !ok {
			missing = append(missing, key+" (registered as "+tpl+")")
		}
	}
	var stale []string
	for key, doc := range documented {
		if _, ok := routes[key]; ok {
			continue
		}
		if _, ok := openAPIMountedOnly[doc]; ok {
			continue
		}
		stale = append(stale, doc)
	}
	sort.Strings(missing)
	sort.Strings(stale)
	for _, m := range missing {
		t.Errorf("route not documented in docs/openapi.yaml: %s", m)
	}
	for _, d := range stale {
		t.Errorf("docs/openapi.yaml documents %s, which the router does not serve", d)
	}
	if len(routes) < 30 {
		t.Errorf("walked only %d routes; the router walk is broken", len(routes))
	}
}

func TestOpenAPIOperationsAreWellFormed(t *testing.T) {
	sp := mustLoadSpec(t)
	ids := map[string]string{}
	for key, op := range sp.operations() {
		id, _ := op["operationId"].(string)
		if id == "" {
			t.Errorf("%s: no operationId", key)
		} else if other, dup := ids[id]; dup {
			t.Errorf("%s: operationId %s also used by %s", key, id, other)
		}
		ids[id] = key
		role, _ := op["x-required-role"].(string)
		sec, hasSec := op["security"].([]any)
		public := hasSec && len(sec) == 0
		switch {
		case role == "":
			t.Errorf("%s: no x-required-role", key)
		case strings.HasPrefix(role, "none") && !hasSec:
			t.Errorf("%s: public route must override security", key)
		case !strings.HasPrefix(role, "none") && hasSec:
			t.Errorf("%s: role %s but security overridden", key, role)
		}
		responses := asMap(op["responses"])
		if len(responses) == 0 {
			t.Errorf("%s: no responses", key)
		}
		if !public && !strings.HasPrefix(role, "none") && responses["401"] == nil {
			t.Errorf("%s: needs %s but documents no 401", key, role)
		}
		// Every path parameter is declared.
		method, p, _ := strings.Cut(key, " ")
		declared := map[string]bool{}
		params, _ := op["parameters"].([]any)
		for _, prm := range params {
			if pm := sp.deref(asMap(prm)); pm["in"] == "path" {
				declared[pm["name"].(string)] = true
			}
		}
		for _, m := range templateParamRE.FindAllStringSubmatch(p, -1) {
			if !declared[m[1]] {
				t.Errorf("%s %s: path parameter %s not declared", method, p, m[1])
			}
		}
	}
}

// TestOpenAPIAuthMatchesServer calls every documented operation without
// credentials and with a READ-only user: public routes never answer 401, READ
// routes answer 401 anonymously, WRITE routes answer 403 to the reader.
func TestOpenAPIAuthMatchesServer(t *testing.T) {
	sp := mustLoadSpec(t)
	s, _ := newDocServer(t, httpapi.AuthConfig{Users: []httpapi.User{
		{Username: "admin", Password: "password", Roles: []string{"ADMIN"}},
		{Username: "reader", Password: "r", Roles: []string{"READ"}},
	}})
	routes := walkRoutes(t, s.Router())
	values := map[string]string{"streamPrefix": "orders", "consumerGroup": "billing", "memberId": "m1", "reshardingId": "r1", "shardIndex": "0", "path": "index.html"}
	for key, op := range sp.operations() {
		method, p, _ := strings.Cut(key, " ")
		if _, ok := routes[method+" "+pathShape(p)]; !ok {
			continue // mounted by cmd only
		}
		concrete := templateParamRE.ReplaceAllStringFunc(p, func(m string) string {
			return values[templateParamRE.FindStringSubmatch(m)[1]]
		})
		role := strings.Fields(op["x-required-role"].(string))[0]
		anon := serveDoc(s, method, concrete, "", "", `{}`)
		reader := serveDoc(s, method, concrete, "reader", "r", `{}`)
		switch role {
		case "none":
			// A handler may refuse (login with no credentials is a 401 with a body);
			// the authentication layer's refusals carry WWW-Authenticate or are 403.
			if anon.Code == http.StatusForbidden || (anon.Code == http.StatusUnauthorized && anon.Header().Get("WWW-Authenticate") != "") {
				t.Errorf("%s is documented public but answers %d without credentials", key, anon.Code)
			}
			continue
		case "READ":
			if anon.Code != http.StatusUnauthorized {
				t.Errorf("%s needs READ but answers %d without credentials", key, anon.Code)
			}
			if reader.Code == http.StatusUnauthorized || reader.Code == http.StatusForbidden {
				t.Errorf("%s needs READ but refuses a reader with %d", key, reader.Code)
			}
		case "MEMBER":
			if anon.Code != http.StatusUnauthorized {
				t.Errorf("%s needs MEMBER but answers %d without credentials", key, anon.Code)
			}
			if reader.Code != http.StatusForbidden {
				t.Errorf("%s needs MEMBER but answers %d to a reader", key, reader.Code)
			}
		case "WRITE", "ADMIN":
			if anon.Code != http.StatusUnauthorized {
				t.Errorf("%s needs %s but answers %d without credentials", key, role, anon.Code)
			}
			if reader.Code != http.StatusForbidden {
				t.Errorf("%s needs %s but answers %d to a reader", key, role, reader.Code)
			}
		default:
			t.Errorf("%s: unknown x-required-role %q", key, role)
		}
		if anon.Code == http.StatusUnauthorized && anon.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", key)
		}
	}
}

func serveDoc(s *httpapi.Server, method, path, user, pass, body string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" && method != http.MethodGet && method != http.MethodHead {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	return w
}

func TestOpenAPIServedDocument(t *testing.T) {
	s, _ := newDocServer(t, httpapi.AuthConfig{})
	w := serveDoc(s, http.MethodGet, "/coord/v1/openapi.yaml", "admin", "password", "")
	if w.Code != http.StatusOK {
		t.Fatalf("GET /coord/v1/openapi.yaml = %d %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/yaml") {
		t.Errorf("Content-Type = %q", ct)
	}
	if !bytes.Equal(w.Body.Bytes(), docs.OpenAPI) {
		t.Error("served document differs from docs.OpenAPI")
	}
	onDisk, err := os.ReadFile(filepath.Join("..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, w.Body.Bytes()) {
		t.Error("served document differs from docs/openapi.yaml")
	}
	if w := serveDoc(s, http.MethodGet, "/coord/v1/openapi.yaml", "", "", ""); w.Code != http.StatusUnauthorized {
		t.Errorf("anonymous GET /coord/v1/openapi.yaml = %d, want 401", w.Code)
	}
}

// TestOpenAPISchemasMatchGoTypes compares every documented body schema with the Go
// struct the server encodes or decodes: same JSON names, compatible types,
// nullable exactly where the Go field is a pointer, and (for responses) every
// field required unless it is omitempty.
func TestOpenAPISchemasMatchGoTypes(t *testing.T) {
	sp := mustLoadSpec(t)
	for name, ty := range openAPISchemaTypes {
		t.Run(name, func(t *testing.T) {
			sch := sp.schema(name)
			if sch == nil {
				t.Fatalf("components.schemas.%s missing", name)
			}
			flat := sp.flatten(sch)
			fields := goJSONFields(ty)
			props := map[string]bool{}
			for p := range flat.props {
				props[p] = true
			}
			for _, f := range fields {
				ps, ok := flat.props[f.name]
				if !ok {
					t.Errorf("%s.%s (%s) not documented", ty.Name(), f.name, f.typ)
					continue
				}
				delete(props, f.name)
				sp.checkType(t, name+"."+f.name, ps, f.typ)
				if !openAPIRequestTypes[name] {
					if want := !f.omitempty; flat.required[f.name] != want {
						t.Errorf("%s.%s: required=%v, want %v (the server always writes it unless omitempty)", name, f.name, flat.required[f.name], want)
					}
				}
			}
			for p := range props {
				t.Errorf("%s documents %s, which %s does not have", name, p, ty)
			}
		})
	}
}

// openAPISchemaTypes maps each schema named after a Go struct to that struct.
var openAPISchemaTypes = map[string]reflect.Type{
	"ErrorResponse":           reflect.TypeFor[wire.ErrorResponse](),
	"LoginError":              reflect.TypeFor[wire.LoginError](),
	"Liveness":                reflect.TypeFor[wire.Liveness](),
	"LoginRequest":            reflect.TypeFor[wire.LoginRequest](),
	"LoginResponse":           reflect.TypeFor[wire.LoginResponse](),
	"SessionResponse":         reflect.TypeFor[wire.SessionResponse](),
	"CreateRequest":           reflect.TypeFor[wire.CreateRequest](),
	"StreamCreateResponse":    reflect.TypeFor[wire.StreamCreateResponse](),
	"DeleteRequest":           reflect.TypeFor[wire.DeleteRequest](),
	"ScaleRequest":            reflect.TypeFor[wire.ScaleRequest](),
	"RollbackRequest":         reflect.TypeFor[wire.RollbackRequest](),
	"RoutingShard":            reflect.TypeFor[wire.RoutingShard](),
	"ProducerRoutingResponse": reflect.TypeFor[wire.ProducerRoutingResponse](),
	"MigrationsResponse":      reflect.TypeFor[wire.ReshardingsResponse](),
	"HealthResponse":          reflect.TypeFor[wire.HealthResponse](),
	"CompatibilityResponse":   reflect.TypeFor[wire.CompatibilityResponse](),
	"CoordinationVersion":     reflect.TypeFor[wire.CoordinationVersion](),
	"SemanticVersion":         reflect.TypeFor[wire.SemanticVersion](),
	"Readiness":               reflect.TypeFor[wire.Readiness](),
	"GroupsResponse":          reflect.TypeFor[wire.GroupsResponse](),
	"MembersResponse":         reflect.TypeFor[wire.MembersResponse](),
	"MemberMetadata":          reflect.TypeFor[wire.MemberMetadata](),
	"ConsumptionResponse":     reflect.TypeFor[wire.ConsumptionResponse](),
	"ConsumerShardProgress":   reflect.TypeFor[wire.ConsumerShardProgress](),
	"OffsetsResponse":         reflect.TypeFor[wire.OffsetsResponse](),
	"ShardOffset":             reflect.TypeFor[wire.ShardOffset](),
	"MessagesPage":            reflect.TypeFor[wire.MessagesPage](),
	"StreamRecord":            reflect.TypeFor[wire.StreamRecord](),
	"AuditEvent":              reflect.TypeFor[wire.AuditEvent](),
	"AuditPage":               reflect.TypeFor[wire.AuditPage](),
	"GroupReplay":             reflect.TypeFor[wire.GroupReplay](),
	"AdoptRequest":            reflect.TypeFor[wire.AdoptRequest](),
	"StreamRoutingResponse":   reflect.TypeFor[wire.StreamRoutingResponse](),
	"Stream":                  reflect.TypeFor[wire.Stream](),
	"StreamsResponse":         reflect.TypeFor[wire.StreamsResponse](),
	"StreamReplay":            reflect.TypeFor[wire.StreamReplay](),
	"ShardRef":                reflect.TypeFor[wire.ShardRef](),
	"GroupView":               reflect.TypeFor[wire.Group](),
	"MigrationView":           reflect.TypeFor[wire.Resharding](),
	"StateChange":             reflect.TypeFor[wire.StateChange](),
	"Provisioning":            reflect.TypeFor[wire.Provisioning](),
	"ShardDrainRow":           reflect.TypeFor[wire.ShardDrainRow](),
	"GroupDrainView":          reflect.TypeFor[wire.GroupDrain](),
	"RevokeProgress":          reflect.TypeFor[wire.RevokeProgress](),
	"RollbackInfo":            reflect.TypeFor[wire.RollbackInfo](),
	"Retirement":              reflect.TypeFor[wire.Retirement](),
	"AssignmentsView":         reflect.TypeFor[wire.Assignments](),
	"HeartbeatRequest":        reflect.TypeFor[wire.HeartbeatRequest](),
	"Capacity":                reflect.TypeFor[wire.Capacity](),
	"RevokingReport":          reflect.TypeFor[wire.RevokingReport](),
	"ShardProgress":           reflect.TypeFor[wire.ShardProgress](),
	"HeartbeatResponse":       reflect.TypeFor[wire.HeartbeatResponse](),
	"AssignmentResponse":      reflect.TypeFor[wire.HeartbeatAssignment](),
	"StreamScaleResult":       reflect.TypeFor[wire.StreamScaleResult](),
	"GrafanaOptionRow":        reflect.TypeFor[wire.GrafanaOptionRow](),
	"GrafanaGroupRow":         reflect.TypeFor[wire.GrafanaGroupRow](),
	"GrafanaMemberRow":        reflect.TypeFor[wire.GrafanaMemberRow](),
	"GrafanaShardRow":         reflect.TypeFor[wire.GrafanaShardRow](),
	"GrafanaAssignmentRow":    reflect.TypeFor[wire.GrafanaAssignmentRow](),
	"GrafanaMessageRow":       reflect.TypeFor[wire.GrafanaMessageRow](),
}

// openAPIRequestTypes are decoded, not encoded: "required" follows validation, not Go.
var openAPIRequestTypes = map[string]bool{
	"LoginRequest": true, "CreateRequest": true, "DeleteRequest": true, "ScaleRequest": true,
	"RollbackRequest": true, "HeartbeatRequest": true, "Capacity": true, "RevokingReport": true,
	"ShardProgress": true, "AdoptRequest": true,
}

type goJSONField struct {
	name      string
	typ       reflect.Type
	omitempty bool
}

// goJSONFields lists what encoding/json writes for a struct (embedded structs flattened).
func goJSONFields(t reflect.Type) []goJSONField {
	var out []goJSONField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, goJSONFields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, goJSONField{name: name, typ: f.Type, omitempty: strings.Contains(opts, "omitempty")})
	}
	return out
}

type flatAPISchema struct {
	typ      string
	format   string
	nullable bool
	props    map[string]map[string]any
	required map[string]bool
	items    map[string]any
	addl     any
	enum     []any
	refs     []string // names of component schemas this one is (via $ref / allOf)
}

// flatten resolves $ref and merges allOf.
func (s *apiSpec) flatten(v map[string]any) flatAPISchema {
	f := flatAPISchema{props: map[string]map[string]any{}, required: map[string]bool{}}
	s.flattenInto(&f, v)
	return f
}

func (s *apiSpec) flattenInto(f *flatAPISchema, v map[string]any) {
	if ref, ok := v["$ref"].(string); ok {
		f.refs = append(f.refs, strings.TrimPrefix(ref, "#/components/schemas/"))
		s.flattenInto(f, s.deref(v))
		return
	}
	if n, ok := v["nullable"].(bool); ok && n {
		f.nullable = true
	}
	if t, ok := v["type"].(string); ok {
		f.typ = t
	}
	if t, ok := v["format"].(string); ok {
		f.format = t
	}
	for name, p := range asMap(v["properties"]) {
		f.props[name] = asMap(p)
	}
	if req, ok := v["required"].([]any); ok {
		for _, r := range req {
			f.required[r.(string)] = true
		}
	}
	if it := asMap(v["items"]); it != nil {
		f.items = it
	}
	if a, ok := v["additionalProperties"]; ok {
		f.addl = a
	}
	if e, ok := v["enum"].([]any); ok {
		f.enum = e
	}
	if all, ok := v["allOf"].([]any); ok {
		for _, sub := range all {
			s.flattenInto(f, asMap(sub))
		}
		if f.typ == "" && len(f.props) > 0 {
			f.typ = "object"
		}
	}
}

var timeReflectType = reflect.TypeFor[time.Time]()

func (s *apiSpec) checkType(t *testing.T, where string, sch map[string]any, ty reflect.Type) {
	t.Helper()
	f := s.flatten(sch)
	if ty.Kind() == reflect.Pointer {
		if !f.nullable {
			t.Errorf("%s: Go type %s is a pointer (may be null) but the schema is not nullable", where, ty)
		}
		ty = ty.Elem()
	} else if f.nullable && ty.Kind() != reflect.Slice && ty.Kind() != reflect.Map && ty.Kind() != reflect.Interface {
		t.Errorf("%s: schema is nullable but Go type %s never encodes null", where, ty)
	}
	want := ""
	switch {
	case ty == timeReflectType:
		want = "string"
		if f.format != "date-time" {
			t.Errorf("%s: time.Time should be format date-time, got %q", where, f.format)
		}
	case ty.Kind() == reflect.String:
		want = "string"
	case ty.Kind() == reflect.Bool:
		want = "boolean"
	case ty.Kind() >= reflect.Int && ty.Kind() <= reflect.Uint64:
		want = "integer"
	case ty.Kind() == reflect.Float32 || ty.Kind() == reflect.Float64:
		want = "number"
	case ty.Kind() == reflect.Slice || ty.Kind() == reflect.Array:
		want = "array"
		if f.items == nil {
			t.Errorf("%s: array without items", where)
		} else {
			s.checkType(t, where+"[]", f.items, ty.Elem())
		}
	case ty.Kind() == reflect.Map:
		want = "object"
		if a := asMap(f.addl); a != nil {
			s.checkType(t, where+"{}", a, ty.Elem())
		} else if f.addl != true {
			t.Errorf("%s: map needs additionalProperties", where)
		}
	case ty.Kind() == reflect.Interface:
		want = "object"
	case ty.Kind() == reflect.Struct:
		want = "object"
		for name, goType := range openAPISchemaTypes {
			if goType != ty {
				continue
			}
			found := false
			for _, r := range f.refs {
				found = found || r == name
			}
			if !found {
				t.Errorf("%s: Go type %s should refer to #/components/schemas/%s (refs %v)", where, ty, name, f.refs)
			}
		}
	}
	if f.typ != want {
		t.Errorf("%s: schema type %q, Go type %s wants %q", where, f.typ, ty, want)
	}
}

// TestOpenAPIErrorCodes checks the ErrorResponse errorCode enum against every code
// the server can produce (string literals in commands.Error and ErrorResponse
// composite literals), both ways, and that every x-error-codes is in the enum.
func TestOpenAPIErrorCodes(t *testing.T) {
	sp := mustLoadSpec(t)
	enum := map[string]bool{}
	for _, e := range asMap(asMap(sp.schema("ErrorResponse")["properties"])["errorCode"])["enum"].([]any) {
		enum[e.(string)] = true
	}
	produced := map[string]string{}
	for _, dir := range []string{".", "guard", filepath.Join("..", "commands")} {
		for code, where := range errorCodesIn(t, dir) {
			produced[code] = where
		}
	}
	for code, where := range produced {
		if !enum[code] {
			t.Errorf("errorCode %s (%s) is not in ErrorResponse.errorCode", code, where)
		}
	}
	for code := range enum {
		if _, ok := produced[code]; !ok {
			t.Errorf("ErrorResponse.errorCode lists %s, which no code produces", code)
		}
	}
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				if k == "x-error-codes" {
					for _, code := range c.([]any) {
						if !enum[code.(string)] {
							t.Errorf("%s: x-error-codes %s is not in ErrorResponse.errorCode", where, code)
						}
					}
					continue
				}
				walk(where+"/"+k, c)
			}
		case []any:
			for i, c := range x {
				walk(where+"/"+strconv.Itoa(i), c)
			}
		}
	}
	walk("#", sp.root)
}

func errorCodesIn(t *testing.T, dir string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			var typeName string
			switch ty := lit.Type.(type) {
			case *ast.Ident:
				typeName = ty.Name
			case *ast.SelectorExpr:
				typeName = ty.Sel.Name
			}
			if typeName != "Error" && typeName != "ErrorResponse" {
				return true
			}
			for i, el := range lit.Elts {
				var val ast.Expr
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok && (k.Name == "Code" || k.Name == "ErrorCode") {
						val = kv.Value
					}
				} else if typeName == "Error" && i == 1 {
					val = el
				}
				if bl, ok := val.(*ast.BasicLit); ok && bl.Kind == token.STRING {
					code, _ := strconv.Unquote(bl.Value)
					out[code] = fset.Position(bl.Pos()).String()
				}
			}
			return true
		})
	}
	if len(out) == 0 {
		t.Fatalf("no error codes found in %s", dir)
	}
	return out
}

// TestOpenAPIResponsesConform drives a coordinator over an in-memory log through
// every kind of answer and validates each status and body against the document.
func TestOpenAPIResponsesConform(t *testing.T) {
	sp := mustLoadSpec(t)
	s, _ := newDocServer(t, httpapi.AuthConfig{})
	ops := sp.operations()
	seen := map[string]bool{}
	call := func(method, tpl, path, body string) map[string]any {
		t.Helper()
		key := method + " " + tpl
		op := ops[key]
		if op == nil {
			t.Fatalf("%s not documented", key)
		}
		seen[key] = true
		w := serveDoc(s, method, path, "admin", "password", body)
		if body != "" && w.Code < 300 {
			// The server accepted the body: the document must describe it.
			if rb := asMap(asMap(asMap(op["requestBody"])["content"])["application/json"]); rb != nil {
				sp.validateJSON(t, key+" request", asMap(rb["schema"]), []byte(body))
			}
		}
		resp := asMap(asMap(op["responses"])[strconv.Itoa(w.Code)])
		if resp == nil {
			t.Errorf("%s %s answered %d, which is not documented (body %s)", method, path, w.Code, w.Body)
			return nil
		}
		resp = sp.deref(resp)
		content := asMap(resp["content"])
		js := asMap(content["application/json"])
		if js == nil {
			return nil
		}
		if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s %s: Content-Type %q, documented application/json", method, path, ct)
		}
		v := sp.validateJSON(t, fmt.Sprintf("%s %s -> %d", method, path, w.Code), asMap(js["schema"]), w.Body.Bytes())
		if codes, ok := resp["x-error-codes"].([]any); ok {
			got := asMap(v)["errorCode"]
			found := false
			for _, c := range codes {
				found = found || c == got
			}
			if !found {
				t.Errorf("%s %s -> %d: errorCode %v not in documented %v", method, path, w.Code, got, codes)
			}
		}
		m, _ := v.(map[string]any)
		return m
	}
	const (
		sp1 = "/coord/v1/streams/{streamPrefix}"
		gp  = sp1 + "/groups/{consumerGroup}"
		mg  = "/coord/v1/monitoring/streams/{streamPrefix}/groups/{consumerGroup}"
	)
	g := "/coord/v1/streams/orders/groups/billing"
	mgp := "/coord/v1/monitoring/streams/orders/groups/billing"

	call("GET", "/healthz", "/healthz", "")
	call("GET", "/readyz", "/readyz", "")
	call("HEAD", "/healthz", "/healthz", "")
	call("HEAD", "/readyz", "/readyz", "")
	call("POST", "/coord/v1/auth/login", "/coord/v1/auth/login", `{"username":"admin","password":"password"}`)
	call("POST", "/coord/v1/auth/login", "/coord/v1/auth/login", `{"username":"admin","password":"wrong"}`)
	call("GET", "/coord/v1/monitoring/health", "/coord/v1/monitoring/health", "")
	call("GET", "/coord/v1/monitoring/session", "/coord/v1/monitoring/session", "")
	call("GET", "/coord/v1/monitoring/compatibility", "/coord/v1/monitoring/compatibility", "")

	call("POST", gp, g, `{"initialShardCount":4,"requestedBy":"alice","reason":"test"}`)
	call("POST", gp, g, `{"initialShardCount":4,"requestedBy":"alice"}`)          // 409
	call("POST", gp, g+"x", `{"initialShardCount":"four","requestedBy":"alice"}`) // 400
	call("POST", sp1, "/coord/v1/streams/payments", `{"initialShardCount":2,"requestedBy":"alice"}`)
	call("POST", sp1, "/coord/v1/streams/payments", `{"initialShardCount":2,"requestedBy":"alice"}`)                // 409
	call("POST", sp1, "/coord/v1/streams/sorted", `{"initialShardCount":2,"requestedBy":"alice","ordering":"KEY"}`) // 400
	call("GET", sp1, "/coord/v1/streams/payments", "")
	call("GET", sp1, "/coord/v1/streams/nothing", "") // 404
	call("GET", sp1+"/producer-routing", "/coord/v1/streams/payments/producer-routing", "")
	call("GET", sp1+"/producer-routing", "/coord/v1/streams/nothing/producer-routing", "")                        // 404
	call("POST", sp1+"/adopt", "/coord/v1/streams/theirs/adopt", `{"shardCount":2,"requestedBy":"alice"}`)        // 503: no Redis for shard streams
	call("POST", sp1+"/adopt", "/coord/v1/streams/theirs/adopt", `{"requestedBy":"alice"}`)                       // 400: shardCount missing
	call("POST", gp, "/coord/v1/streams/payments/groups/ledger", `{"initialShardCount":3,"requestedBy":"alice"}`) // 400: the stream has 2
	call("POST", gp, "/coord/v1/streams/payments/groups/ledger", `{"requestedBy":"alice"}`)
	call("GET", "/coord/v1/monitoring/streams", "/coord/v1/monitoring/streams", "")
	call("GET", "/coord/v1/monitoring/streams/{streamPrefix}", "/coord/v1/monitoring/streams/payments", "")
	call("GET", "/coord/v1/monitoring/streams/{streamPrefix}/events", "/coord/v1/monitoring/streams/payments/events", "")
	call("GET", "/coord/v1/monitoring/streams/{streamPrefix}/replay", "/coord/v1/monitoring/streams/payments/replay", "")
	call("GET", "/coord/v1/monitoring/streams/{streamPrefix}/replay", "/coord/v1/monitoring/streams/payments/replay?until=0-1", "") // 404: not yet created
	call("GET", gp, g, "")
	call("GET", gp, "/coord/v1/streams/orders/groups/nope", "") // 404
	call("GET", gp+"/producer-routing", g+"/producer-routing", "")

	hb := `{"protocolVersion":1,"requestId":"r1","memberId":"m1","memberName":"m1","memberEpoch":0,"metadataVersion":0,"runtimeConsumerCapacity":{"runtimeMaxConcurrency":2,"availableConcurrency":1},"ownedShards":[],"revokingShards":[],"shardProgress":[]}`
	resp := call("POST", gp+"/members/{memberId}/heartbeat", g+"/members/m1/heartbeat", hb)
	epoch, _ := resp["memberEpoch"].(json.Number).Int64()
	hb2 := fmt.Sprintf(`{"protocolVersion":1,"requestId":"r2","memberId":"m1","memberEpoch":%d,"metadataVersion":2,"runtimeConsumerCapacity":{"runtimeMaxConcurrency":2,"availableConcurrency":1},"ownedShards":[{"shardIndex":0},{"shardIndex":1},{"shardIndex":2},{"shardIndex":3}],"shardProgress":[{"shard":{"shardIndex":0},"streamKey":"orders:0","lastDeliveredId":"1-0","lastAckedId":"1-0","pendingCount":0,"updatedAt":"2026-01-02T03:04:05Z"}]}`, epoch)
	call("POST", gp+"/members/{memberId}/heartbeat", g+"/members/m1/heartbeat", hb2)
	call("POST", gp+"/members/{memberId}/heartbeat", g+"/members/m1/heartbeat", `{"protocolVersion":0}`) // 400

	call("GET", mg, mgp, "")
	call("GET", mg+"/members", mgp+"/members", "")
	call("GET", mg+"/assignments", mgp+"/assignments", "")
	call("GET", mg+"/consumption", mgp+"/consumption", "")
	call("GET", mg+"/offsets", mgp+"/offsets", "")                                // 503: no stream reader
	call("GET", mg+"/shards/{shardIndex}/messages", mgp+"/shards/9/messages", "") // 400
	call("GET", mg+"/shards/{shardIndex}/messages", mgp+"/shards/0/messages", "") // 503
	call("GET", "/coord/v1/monitoring/groups", "/coord/v1/monitoring/groups", "")

	// Grafana rows are top-level arrays; call validates every row against its schema.
	const gf = "/coord/v1/monitoring/grafana"
	gq := "?streamPrefix=orders&consumerGroup=billing"
	call("GET", gf+"/groups", gf+"/groups", "") // 503: no stream reader
	call("GET", gf+"/options/streams", gf+"/options/streams", "")
	call("GET", gf+"/options/consumer-groups", gf+"/options/consumer-groups?streamPrefix=orders", "")
	call("GET", gf+"/options/shards", gf+"/options/shards"+gq, "")
	call("GET", gf+"/options/shards", gf+"/options/shards?streamPrefix=orders&consumerGroup=nope", "") // 404
	call("GET", gf+"/members", gf+"/members"+gq, "")
	call("GET", gf+"/members", gf+"/members?streamPrefix=orders&consumerGroup=", "") // [] when blank
	call("GET", gf+"/members", gf+"/members?streamPrefix=orders", "")                // 400: consumerGroup missing
	call("GET", gf+"/assignments", gf+"/assignments"+gq, "")
	call("GET", gf+"/shards", gf+"/shards?streamPrefix=nothing&consumerGroup=", "") // [] (wildcard, no match)
	call("GET", gf+"/shards", gf+"/shards?streamPrefix=&consumerGroup=", "")        // 503: no stream reader
	call("GET", gf+"/shards", gf+"/shards?streamPrefix=orders&consumerGroup=nope", "")
	call("GET", gf+"/messages", gf+"/messages"+gq+"&shardIndex=9", "")   // 400
	call("GET", gf+"/messages", gf+"/messages"+gq+"&shardIndex=all", "") // 503
	for path, want := range map[string]int{gf + "/members" + gq: 1, gf + "/assignments" + gq: 4, gf + "/options/shards" + gq: 4, gf + "/options/streams": 2} {
		var rows []map[string]any
		if w := serveDoc(s, "GET", path, "admin", "password", ""); json.Unmarshal(w.Body.Bytes(), &rows) != nil || len(rows) != want {
			t.Errorf("GET %s: %d rows, want %d: %s", path, len(rows), want, w.Body)
		}
	}

	call("PUT", gp+"/autoscaling", g+"/autoscaling", `{"minShards":2,"maxShards":16,"targetEntriesPerSecondPerShard":500,"maxLagSecondsPerShard":30,"dryRun":true,"requestedBy":"alice"}`)
	call("PUT", gp+"/autoscaling", g+"/autoscaling", `{"minShards":0,"maxShards":16,"targetEntriesPerSecondPerShard":500,"requestedBy":"alice"}`) // 400
	call("GET", gp+"/autoscaling", g+"/autoscaling", "")
	call("DELETE", gp+"/autoscaling", g+"/autoscaling", "")
	call("PUT", gp+"/ordering", g+"/ordering", `{"ordering":"KEY","requestedBy":"alice","reason":"per-key order"}`)
	call("PUT", gp+"/ordering", g+"/ordering", `{"ordering":"FIFO","requestedBy":"alice"}`) // 400
	mig := call("POST", gp+"/scale", g+"/scale", `{"targetShardCount":6,"requestedBy":"alice","reason":"more"}`)
	call("POST", gp+"/scale", g+"/scale", `{"targetShardCount":8,"requestedBy":"alice","reason":"again"}`) // 409 while active
	id, _ := mig["reshardingId"].(string)
	call("GET", gp+"/migrations", g+"/migrations", "")
	call("GET", gp+"/migrations/{reshardingId}", g+"/migrations/"+id, "")
	call("GET", mg+"/migrations", mgp+"/migrations", "")
	call("GET", mg+"/migrations/{reshardingId}", mgp+"/migrations/"+id, "")
	call("GET", mg+"/migrations/{reshardingId}", mgp+"/migrations/nope", "") // 404
	call("GET", mg, mgp, "")
	call("POST", gp+"/migrations/{reshardingId}/rollback", g+"/migrations/"+id+"/rollback", `{"requestedBy":"alice","reason":"oops","policy":"metadata"}`)
	call("POST", gp+"/migrations/{reshardingId}/rollback", g+"/migrations/nope/rollback", `{"requestedBy":"alice","reason":"oops"}`) // 404
	// A second group of a stream with metadata takes its shard count; the
	// stream scale moves both.
	call("POST", gp, "/coord/v1/streams/payments/groups/audit", `{"requestedBy":"alice"}`)
	res := call("POST", sp1+"/scale", "/coord/v1/streams/payments/scale", `{"targetShardCount":3,"requestedBy":"alice","reason":"more"}`)
	if migs, _ := res["migrations"].([]any); len(migs) != 2 || asMap(migs[0])["toShardCount"] != json.Number("3") {
		t.Errorf("stream scale should start a resharding of both groups: %v", res)
	}
	// A stream without groups scales at once.
	call("POST", sp1, "/coord/v1/streams/solo", `{"initialShardCount":2,"requestedBy":"alice"}`)
	res = call("POST", sp1+"/scale", "/coord/v1/streams/solo/scale", `{"targetShardCount":4,"requestedBy":"alice","reason":"more"}`)
	if groups, _ := res["affectedConsumerGroups"].([]any); len(groups) != 0 {
		t.Errorf("a stream without groups: %v", res)
	}
	call("POST", sp1+"/scale", "/coord/v1/streams/nothing/scale", `{"targetShardCount":3,"requestedBy":"alice","reason":"more"}`) // 404

	page := call("GET", "/coord/v1/monitoring/events", "/coord/v1/monitoring/events?limit=3", "")
	if page["nextAfter"] == nil {
		t.Error("a full page should carry nextAfter")
	}
	call("GET", "/coord/v1/monitoring/events", "/coord/v1/monitoring/events?after=bad", "") // 400
	call("GET", mg+"/events", mgp+"/events", "")
	call("GET", mg+"/replay", mgp+"/replay", "")
	call("GET", mg+"/replay", mgp+"/replay?until=0-1", "") // 404: not yet created

	call("DELETE", gp, g, `{"requestedBy":"alice","reason":"done"}`) // 409: live member
	call("DELETE", gp, g, `{"requestedBy":"alice","reason":"done","force":true}`)
	call("GET", "/coord/v1/openapi.yaml", "/coord/v1/openapi.yaml", "")
	call("POST", "/coord/v1/log/restore", "/coord/v1/log/restore", `{"requestedBy":"alice","reason":"the log is fine"}`) // 409 LOG_NOT_LOST
	call("POST", "/coord/v1/log/restore", "/coord/v1/log/restore", `{"requestedBy":"alice"}`)                            // 400: reason

	for key, op := range ops {
		method, p, _ := strings.Cut(key, " ")
		if seen[key] || p == "/metrics" || strings.HasPrefix(p, "/console") {
			continue
		}
		_ = op
		t.Errorf("%s %s is not exercised by this test", method, p)
	}
}

// validateJSON decodes data and checks it against the schema; it returns the value.
func (s *apiSpec) validateJSON(t *testing.T, where string, sch map[string]any, data []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Errorf("%s: not JSON: %v: %s", where, err, data)
		return nil
	}
	for _, p := range s.validate(sch, v, "$") {
		t.Errorf("%s: %s", where, p)
	}
	return v
}

func (s *apiSpec) validate(sch map[string]any, v any, at string) []string {
	f := s.flatten(sch)
	if v == nil {
		if f.nullable {
			return nil
		}
		return []string{at + ": null, schema not nullable"}
	}
	var problems []string
	if len(f.enum) > 0 {
		ok := false
		for _, e := range f.enum {
			ok = ok || fmt.Sprint(e) == fmt.Sprint(v)
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: %v not in enum %v", at, v, f.enum))
		}
	}
	switch f.typ {
	case "string":
		str, ok := v.(string)
		if !ok {
			return append(problems, fmt.Sprintf("%s: %T, want string", at, v))
		}
		if f.format == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %q is not date-time", at, str))
			}
		}
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return append(problems, fmt.Sprintf("%s: %T, want integer", at, v))
		}
		if _, err := n.Int64(); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %s is not an integer", at, n))
		}
	case "number":
		if _, ok := v.(json.Number); !ok {
			problems = append(problems, fmt.Sprintf("%s: %T, want number", at, v))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			problems = append(problems, fmt.Sprintf("%s: %T, want boolean", at, v))
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return append(problems, fmt.Sprintf("%s: %T, want array", at, v))
		}
		for i, e := range arr {
			problems = append(problems, s.validate(f.items, e, fmt.Sprintf("%s[%d]", at, i))...)
		}
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return append(problems, fmt.Sprintf("%s: %T, want object", at, v))
		}
		for name := range f.required {
			if _, ok := m[name]; !ok {
				problems = append(problems, fmt.Sprintf("%s: required %s missing", at, name))
			}
		}
		for k, e := range m {
			if ps, ok := f.props[k]; ok {
				problems = append(problems, s.validate(ps, e, at+"."+k)...)
				continue
			}
			switch a := f.addl.(type) {
			case map[string]any:
				problems = append(problems, s.validate(a, e, at+"."+k)...)
			case bool:
				if !a {
					problems = append(problems, fmt.Sprintf("%s: unexpected %s", at, k))
				}
			default:
				problems = append(problems, fmt.Sprintf("%s: %s is not documented", at, k))
			}
		}
	case "":
		problems = append(problems, at+": schema without type")
	}
	return problems
}

// TestOpenAPIOperationIDsOfTheReference: the stream routes carry the
// operationIds the reference's 0.3 releases gave them, so clients generated
// from either document call the same operations.
func TestOpenAPIOperationIDsOfTheReference(t *testing.T) {
	ops := mustLoadSpec(t).operations()
	for key, id := range map[string]string{
		"POST /coord/v1/streams/{streamPrefix}":                                        "createStream",
		"GET /coord/v1/streams/{streamPrefix}/producer-routing":                        "getStreamProducerRoutingMetadata",
		"POST /coord/v1/streams/{streamPrefix}/adopt":                                  "adoptExistingStream",
		"POST /coord/v1/streams/{streamPrefix}/scale":                                  "scaleStreamShards",
		"GET /coord/v1/streams/{streamPrefix}/groups/{consumerGroup}/producer-routing": "getProducerRoutingMetadata",
	} {
		if op := ops[key]; op == nil || op["operationId"] != id {
			t.Errorf("%s: operationId %v, want %s", key, op["operationId"], id)
		}
	}
}
