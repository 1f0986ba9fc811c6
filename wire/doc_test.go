package wire_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is this repository's module path.
const module = "github.com/rscoord/rsc"

// importMap is every package of the repository (by its directory) with the
// packages of the repository it may import and the modules outside the
// standard library it may use. The package docs (doc.go) say the same in
// words; TestImportMap holds both to the code.
var importMap = map[string]struct {
	pkgs    []string
	modules []string
}{
	"wire":                {},
	"routing":             {},
	"docs":                {},
	"events":              {modules: []string{"github.com/vmihailenco/msgpack/v5"}},
	"events/eventstest":   {pkgs: []string{"events"}},
	"projection":          {pkgs: []string{"events", "internal/cow", "wire"}, modules: []string{"github.com/vmihailenco/msgpack/v5"}},
	"replay":              {pkgs: []string{"events", "projection", "wire"}, modules: []string{"github.com/vmihailenco/msgpack/v5"}},
	"commands":            {pkgs: []string{"events", "internal/cow", "projection", "routing", "wire"}, modules: []string{"github.com/rs/zerolog"}},
	"coordinator":         {pkgs: []string{"commands", "events", "projection", "replay", "routing", "wire"}, modules: []string{"github.com/rs/zerolog"}},
	"redisstore":          {pkgs: []string{"events", "internal/redisurl", "internal/streamread", "routing"}, modules: []string{"github.com/redis/go-redis/v9"}},
	"httpapi":             {pkgs: []string{"commands", "coordinator", "docs", "events", "httpapi/guard", "internal/streamread", "projection", "routing", "wire"}, modules: []string{"github.com/gorilla/mux", "github.com/rs/zerolog", "golang.org/x/crypto"}},
	"httpapi/guard":       {pkgs: []string{"commands", "coordinator", "events", "routing", "wire"}, modules: []string{"github.com/gorilla/mux", "github.com/rs/zerolog"}},
	"metrics":             {pkgs: []string{"commands", "coordinator", "events", "projection", "wire"}, modules: []string{"github.com/gorilla/mux", "github.com/prometheus/client_golang", "github.com/rs/zerolog"}},
	"client":              {pkgs: []string{"internal/redisurl", "routing", "wire"}, modules: []string{"github.com/redis/go-redis/v9"}},
	"client/member":       {pkgs: []string{"client", "routing"}, modules: []string{"github.com/redis/go-redis/v9"}},
	"client/producer":     {pkgs: []string{"client", "routing"}, modules: []string{"github.com/redis/go-redis/v9"}},
	"internal/faultproxy": {},
	"internal/redisurl":   {modules: []string{"github.com/redis/go-redis/v9"}},
	"internal/benchratio": {},
	"internal/cow":        {},
	"internal/streamread": {},
	"internal/procs":      {modules: []string{"github.com/redis/go-redis/v9"}},
	"internal/consumed":   {modules: []string{"github.com/redis/go-redis/v9"}},
	"internal/redistest":  {pkgs: []string{"internal/procs", "redisstore"}, modules: []string{"github.com/redis/go-redis/v9", "github.com/testcontainers/testcontainers-go", "github.com/moby/moby", "github.com/docker/go-connections"}},
	// The programs wire the packages above together.
	"cmd/coordinator": {pkgs: []string{"commands", "coordinator", "events", "httpapi", "internal/redisurl", "metrics", "projection", "redisstore", "wire"}, modules: []string{"github.com/redis/go-redis/v9", "github.com/rs/zerolog"}},
	"cmd/replay":      {pkgs: []string{"events", "internal/procs", "projection", "redisstore", "replay"}, modules: []string{"github.com/redis/go-redis/v9"}},
	"cmd/rscctl":      {pkgs: []string{"client", "internal/procs", "wire"}},
	"cmd/demo":        {pkgs: []string{"client", "client/member", "client/producer", "internal/consumed", "internal/faultproxy", "internal/procs", "routing", "wire"}, modules: []string{"github.com/redis/go-redis/v9"}},
	"cmd/rscbench":    {pkgs: []string{"client", "client/member", "client/producer", "commands", "coordinator", "events", "httpapi", "internal/procs", "projection", "redisstore", "routing", "wire"}, modules: []string{"github.com/redis/go-redis/v9", "github.com/rs/zerolog"}},
	"cmd/soak":        {pkgs: []string{"cmd/soak/chaos", "internal/procs"}},
	"cmd/soak/chaos":  {pkgs: []string{"client", "client/member", "client/producer", "events", "httpapi", "internal/consumed", "internal/procs", "projection", "redisstore", "replay", "routing", "wire"}, modules: []string{"github.com/redis/go-redis/v9"}},
}

// neverReaches is what a package may not reach, directly or through the
// packages importMap lets it import: the rules (commands) decide without a
// Redis client, without the replay tools and without the machinery that
// runs them, so that the folder answers "may I call Redis here?".
var neverReaches = map[string][]string{
	"commands": {"github.com/redis/go-redis/v9", "replay", "redisstore", "coordinator"},
}

// TestRulesReachNoRedis holds neverReaches to importMap: what a package can
// reach is the closure of what importMap lets it import (TestImportMap holds
// every package to its row). The same as
// go list -deps ./commands | grep -E 'go-redis|rsc/(replay|redisstore|coordinator)$'
// finding nothing.
func TestRulesReachNoRedis(t *testing.T) {
	for pkg, never := range neverReaches {
		reached := map[string]bool{}
		var walk func(p string)
		walk = func(p string) {
			for _, m := range importMap[p].modules {
				reached[m] = true
			}
			for _, q := range importMap[p].pkgs {
				if !reached[q] {
					reached[q] = true
					walk(q)
				}
			}
		}
		walk(pkg)
		for _, n := range never {
			if reached[n] {
				t.Errorf("%s can reach %s through importMap; it must not", pkg, n)
			}
		}
	}
}

// TestImportsOnlyTheStandardLibrary holds the package to its doc comment: any
// client can depend on it without pulling in the server.
func TestImportsOnlyTheStandardLibrary(t *testing.T) {
	for file, imports := range mustImports(t, ".") {
		for _, path := range imports {
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %s: package wire may import only the standard library", file, path)
			}
		}
	}
}

// TestImportMap holds every package of the repository to importMap: what its
// code (tests aside) imports from the repository and from outside the
// standard library is listed there, every package is listed, and a package's
// doc.go names each repository package it may import (so the words cannot
// drift from the code).
func TestImportMap(t *testing.T) {
	root := filepath.Join("..")
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		files := mustImports(t, path)
		if len(files) == 0 {
			return nil
		}
		seen[rel] = true
		allowed, listed := importMap[rel]
		if !listed {
			t.Errorf("package %s is not in importMap: add what it may import", rel)
			return nil
		}
		for file, imports := range files {
			for _, imp := range imports {
				switch {
				case imp == module || strings.HasPrefix(imp, module+"/"):
					if p := strings.TrimPrefix(imp, module+"/"); !slices.Contains(allowed.pkgs, p) {
						t.Errorf("%s/%s imports %s, which importMap does not allow %s", rel, file, p, rel)
					}
				case strings.Contains(strings.SplitN(imp, "/", 2)[0], "."):
					if !slices.ContainsFunc(allowed.modules, func(m string) bool { return imp == m || strings.HasPrefix(imp, m+"/") }) {
						t.Errorf("%s/%s imports %s, a module importMap does not allow %s", rel, file, imp, rel)
					}
				}
			}
		}
		if doc, err := os.ReadFile(filepath.Join(path, "doc.go")); err == nil && !strings.HasPrefix(rel, "cmd/") {
			for _, p := range allowed.pkgs {
				if !strings.Contains(string(doc), filepath.Base(p)) {
					t.Errorf("%s/doc.go does not name %s, which importMap lets it import", rel, p)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range importMap {
		if !seen[p] {
			t.Errorf("importMap lists %s, which is not a package of the repository", p)
		}
	}
}

// mustImports parses the imports of dir's Go files, tests aside, by file name.
func mustImports(t *testing.T, dir string) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		var imports []string
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			imports = append(imports, path)
		}
		out[filepath.Base(file)] = imports
	}
	return out
}
