package stepd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README's Go install works: a consumer module in a directory outside
// the repository runs the README's commands as written (STEPD is the clone)
// and builds and runs a program that imports the client and the probe library.
func TestTheReadmesGoInstallBuildsAConsumer(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var block string
	for _, b := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		if strings.Contains(b[1], "go mod edit") {
			block = b[1]
		}
	}
	if block == "" {
		t.Fatal("README.md has no sh block with the Go install")
	}
	// The README's blocks are indented inside a list item.
	block = regexp.MustCompile(`(?m)^\s+`).ReplaceAllString(block, "")

	dir := t.TempDir()
	if rel, err := filepath.Rel(root, dir); err == nil && !strings.HasPrefix(rel, "..") {
		t.Fatalf("the consumer %s is inside the repository", dir)
	}
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "STEPD="+root, "GOFLAGS=-buildvcs=false", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	run("go", "mod", "init", "example.com/consumer")
	main := `package main

import (
	"context"
	"fmt"

	"github.com/stepd-dev/stepd/clients/go/probe"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

func main() {
	var p *probe.Probe // a nil probe never holds
	v, err := p.Hold(context.Background(), "k", "n", 42)
	fmt.Println(v, err, stepd.ErrInvalidValue != nil)
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	run("bash", "-euo", "pipefail", "-c", block)
	run("go", "build", "-o", "consumer", ".")
	if out := run(filepath.Join(dir, "consumer")); out != "42 <nil> true\n" {
		t.Errorf("the consumer printed %q", out)
	}
}
