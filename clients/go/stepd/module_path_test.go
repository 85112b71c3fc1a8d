package stepd_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The module path in go.mod is the one the docs tell users to `go get`, and
// it lives under the repository the Cargo workspace names as its home.
func TestModulePathIsTheDocumentedOne(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(rel string) string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	m := regexp.MustCompile(`(?m)^module (\S+)$`).FindStringSubmatch(read("clients/go/go.mod"))
	if m == nil {
		t.Fatal("go.mod has no module line")
	}
	module := m[1]

	repo := regexp.MustCompile(`(?m)^repository = "https://([^"]+)"$`).FindStringSubmatch(read("Cargo.toml"))
	if repo == nil {
		t.Fatal(`Cargo.toml's [workspace.package] has no repository = "https://..."`)
	}
	if want := repo[1] + "/clients/go"; module != want {
		t.Errorf("module %s, but the repository is %s: want %s", module, repo[1], want)
	}

	getLine := regexp.MustCompile(`go get (\S+)@latest`)
	docs := []string{"README.md", "clients/go/README.md"}
	more, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, p := range more {
		rel, _ := filepath.Rel(root, p)
		docs = append(docs, rel)
	}
	for _, doc := range docs {
		found := getLine.FindAllStringSubmatch(read(doc), -1)
		if len(found) == 0 && (doc == "README.md" || doc == "clients/go/README.md") {
			t.Errorf("%s has no `go get %s@latest` line", doc, module)
		}
		for _, f := range found {
			if f[1] != module {
				t.Errorf("%s says `go get %s@latest`; the module is %s", doc, f[1], module)
			}
		}
	}
	protos, _ := filepath.Glob(filepath.Join(root, "proto", "stepd", "v1", "*.proto"))
	if len(protos) == 0 {
		t.Fatal("no proto files")
	}
	for _, p := range protos {
		rel, _ := filepath.Rel(root, p)
		if !strings.Contains(read(rel), `option go_package = "`+module+`/gen/stepd/v1;stepdv1";`) {
			t.Errorf("%s: go_package is not under %s", rel, module)
		}
	}
}
