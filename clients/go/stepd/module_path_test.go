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

	// The module is not on the proxy: `go get …@latest` fails, so no doc
	// may say it; the install the READMEs give names the module.
	getLatest := regexp.MustCompile(`go get (\S+)@latest`)
	install := regexp.MustCompile(`-require=(\S+)@v0\.0\.0[\s\\]+-replace=(\S+)=\$STEPD/clients/go`)
	docs := []string{"README.md", "clients/go/README.md"}
	more, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, p := range more {
		rel, _ := filepath.Rel(root, p)
		if rel != filepath.Join("docs", "decisions.md") { // history, which quotes the old line
			docs = append(docs, rel)
		}
	}
	for _, doc := range docs {
		text := read(doc)
		for _, f := range getLatest.FindAllStringSubmatch(text, -1) {
			t.Errorf("%s says `go get %s@latest`, which fails: the module is not published", doc, f[1])
		}
		found := install.FindAllStringSubmatch(text, -1)
		if len(found) == 0 && (doc == "README.md" || doc == "clients/go/README.md") {
			t.Errorf("%s does not give the install (go mod edit -require/-replace) of %s", doc, module)
		}
		for _, f := range found {
			if f[1] != module || f[2] != module {
				t.Errorf("%s installs %s / %s; the module is %s", doc, f[1], f[2], module)
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
