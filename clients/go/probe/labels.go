package probe

import (
	"os"
	"strings"
)

// labelSources maps a label to the environment variables that fill it, first
// set wins. The POD_* / NODE_NAME names are those the Kubernetes downward API
// is conventionally mapped to; STEPD_LABEL_* overrides any of them.
var labelSources = []struct {
	label string
	names []string
}{
	{"pod", []string{"STEPD_LABEL_POD", "POD_NAME"}},
	{"namespace", []string{"STEPD_LABEL_NAMESPACE", "POD_NAMESPACE"}},
	{"node", []string{"STEPD_LABEL_NODE", "NODE_NAME"}},
	{"app", []string{"STEPD_LABEL_APP", "APP_NAME", "OTEL_SERVICE_NAME"}},
}

// namespaceFile is where Kubernetes mounts the pod's namespace for its
// service account.
const namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// EnvironmentLabels returns the labels the environment gives a probe: pod,
// namespace, node and app (see the package documentation). In a pod
// (KUBERNETES_SERVICE_HOST set) without the downward API, the pod falls back
// to HOSTNAME (a pod's hostname is its name) and the namespace to the service
// account's namespace file.
func EnvironmentLabels() map[string]string {
	return environmentLabels(os.Getenv, namespaceFile)
}

func environmentLabels(getenv func(string) string, nsFile string) map[string]string {
	labels := map[string]string{}
	for _, src := range labelSources {
		for _, name := range src.names {
			if v := strings.TrimSpace(getenv(name)); v != "" {
				labels[src.label] = v
				break
			}
		}
	}
	if getenv("KUBERNETES_SERVICE_HOST") != "" {
		if _, ok := labels["pod"]; !ok {
			if host := strings.TrimSpace(getenv("HOSTNAME")); host != "" {
				labels["pod"] = host
			}
		}
		if _, ok := labels["namespace"]; !ok {
			if b, err := os.ReadFile(nsFile); err == nil {
				if ns := strings.TrimSpace(string(b)); ns != "" {
					labels["namespace"] = ns
				}
			}
		}
	}
	return labels
}
