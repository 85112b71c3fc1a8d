package stepd_test

import (
	"bytes"
	"context"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readmeSection is the project README's section whose Go snippet must run.
const readmeSection = "## Use it from Python / Go / grpcurl"

// readmeGoBlocks returns the ```go blocks of the README section.
func readmeGoBlocks(t *testing.T) []string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, readmeSection)
	if start < 0 {
		t.Fatalf("README.md has no %q section", readmeSection)
	}
	text = text[start+len(readmeSection):]
	if end := strings.Index(text, "\n## "); end >= 0 {
		text = text[:end]
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?ms)^```go\n(.*?)^```$").FindAllStringSubmatch(text, -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// The README's Go snippet is a whole program: it is built as a main package
// inside this module (so it uses this checkout of the client) and run
// against a real daemon.
func TestReadmeGoSnippet(t *testing.T) {
	blocks := readmeGoBlocks(t)
	if len(blocks) != 1 {
		t.Fatalf("want one go block in the README section, found %d", len(blocks))
	}
	src := []byte(blocks[0])
	formatted, err := format.Source(src)
	if err != nil {
		t.Fatalf("the README's Go snippet does not parse: %v", err)
	}
	if !bytes.Equal(formatted, src) {
		t.Errorf("the README's Go snippet is not gofmt-formatted; gofmt gives:\n%s", formatted)
	}

	// A directory named testdata inside the module: buildable by path, but
	// skipped by ./... patterns, so a concurrent `go vet ./...` ignores it.
	moduleDir, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	testdata := filepath.Join(moduleDir, "testdata")
	if err := os.MkdirAll(testdata, 0o755); err != nil {
		t.Fatal(err)
	}
	pkgDir, err := os.MkdirTemp(testdata, "readme-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(pkgDir)
		os.Remove(testdata) // only when nothing else is in it
	})
	if err := os.WriteFile(filepath.Join(pkgDir, "main.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "readme-snippet")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./testdata/"+filepath.Base(pkgDir))
	build.Dir = moduleDir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the README's Go snippet: %v\n%s", err, out)
	}

	d := startDaemon(t, daemonConfig{})
	runCtx, runCancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer runCancel()
	run := exec.CommandContext(runCtx, bin)
	run.Env = append(os.Environ(), "STEPD_ADDR="+d.addr)
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("running the README's Go snippet: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}

	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("want 4 lines of output, got %q", stdout.String())
	}
	if f := strings.Fields(lines[0]); len(f) != 2 || f[0] != "stepd" {
		t.Errorf("line 1: %q", lines[0])
	}
	snapSeq, ok := strings.CutPrefix(lines[1], "snapshot at seq ")
	snap, err := strconv.ParseUint(snapSeq, 10, 64)
	if !ok || err != nil || snap == 0 {
		t.Errorf("line 2: %q", lines[1])
	}
	f := strings.Fields(lines[2])
	if len(f) != 3 || f[0] != "event" || f[2] != "true" {
		t.Fatalf("line 3: %q", lines[2])
	}
	if seq, err := strconv.ParseUint(f[1], 10, 64); err != nil || seq <= snap {
		t.Errorf("the breakpoint event's seq %q should follow the snapshot's %d", f[1], snap)
	}
	if lines[3] != "PAUSE_NOT_FOUND p-unknown" {
		t.Errorf("line 4: %q", lines[3])
	}

	// The snippet's breakpoint is really in the daemon.
	c := d.dial(t)
	bps, err := c.ListBreakpoints(testContext(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, bp := range bps {
		if bp.GetSpec().GetSource().GetPath() == "/srv/app.py" && bp.GetSpec().GetCondition() == "user_id == 7" {
			found = true
		}
	}
	if !found {
		t.Errorf("the snippet's breakpoint is not listed: %v", bps)
	}
}
