package probe

import (
	"maps"
	"os"
	"path/filepath"
	"testing"
)

func TestEnvironmentLabels(t *testing.T) {
	env := func(kv map[string]string) func(string) string {
		return func(k string) string { return kv[k] }
	}
	ns := filepath.Join(t.TempDir(), "namespace")
	if err := os.WriteFile(ns, []byte("payments\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		want map[string]string
	}{
		{"downward API names", map[string]string{"POD_NAME": "web-1", "POD_NAMESPACE": "shop", "NODE_NAME": "n7", "OTEL_SERVICE_NAME": "orders"},
			map[string]string{"pod": "web-1", "namespace": "shop", "node": "n7", "app": "orders"}},
		{"STEPD_LABEL_* wins, blanks are unset", map[string]string{"POD_NAME": "web-1", "STEPD_LABEL_POD": "canary-0", "APP_NAME": " ", "OTEL_SERVICE_NAME": "orders"},
			map[string]string{"pod": "canary-0", "app": "orders"}},
		{"in a pod without the downward API", map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "api-7d9f-x2"},
			map[string]string{"pod": "api-7d9f-x2", "namespace": "payments"}},
		{"HOSTNAME outside a pod is a machine's", map[string]string{"HOSTNAME": "laptop"}, map[string]string{}},
	} {
		if got := environmentLabels(env(c.env), ns); !maps.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
