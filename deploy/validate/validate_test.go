package validate

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The chart's renders (deploy/test.sh keeps them equal to a fresh render)
// and the examples.
const (
	renders  = "../k8s/*.yaml"
	examples = "../examples/*.yaml"
)

func files(t *testing.T, pattern string) []string {
	t.Helper()
	found, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatalf("no manifests match %s", pattern)
	}
	return found
}

func decodeFile(t *testing.T, path string) []any {
	t.Helper()
	stream, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := DecodeAll(stream)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(objs) == 0 {
		t.Fatalf("%s: no documents", path)
	}
	return objs
}

func TestEveryManifestDecodesStrictly(t *testing.T) {
	for _, path := range append(files(t, renders), files(t, examples)...) {
		t.Run(filepath.Base(path), func(t *testing.T) { decodeFile(t, path) })
	}
}

// The rendered Deployment, as text, for the negative tests.
func renderedDeployment(t *testing.T) string {
	t.Helper()
	stream, err := os.ReadFile("../k8s/tls.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range Documents(stream) {
		if strings.Contains(string(doc), "\nkind: Deployment\n") {
			if _, err := Decode(doc); err != nil {
				t.Fatalf("the rendered Deployment itself does not decode: %v", err)
			}
			return string(doc)
		}
	}
	t.Fatal("no Deployment in ../k8s/tls.yaml")
	return ""
}

func TestAMisspeltFieldIsRefused(t *testing.T) {
	doc := renderedDeployment(t)
	cases := []struct{ name, from, to, want string }{
		{"misspelt", "readOnlyRootFilesystem:", "readOnlyRootFilesytem:", "unknown field"},
		{"another case", "readOnlyRootFilesystem:", "readOnlyRootFileSystem:", "unknown field"},
		{"misplaced", "      serviceAccountName:", "      serviceAccount_name:", "unknown field"},
		{"a probe's field", "          livenessProbe:\n            grpc:\n              port:",
			"          livenessProbe:\n            grpc:\n              prot:", "unknown field"},
		{"wrong type", "replicas: 1", "replicas: one", "cannot unmarshal"},
		{"duplicate key", "  replicas: 1\n", "  replicas: 1\n  replicas: 1\n", "replicas"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(doc, c.from) {
				t.Fatalf("the rendered Deployment has no %q", c.from)
			}
			broken := strings.Replace(doc, c.from, c.to, 1)
			_, err := Decode([]byte(broken))
			if err == nil {
				t.Fatalf("%q in place of %q was accepted", c.to, c.from)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
		})
	}
}

func TestAnUnknownKindIsRefused(t *testing.T) {
	_, err := Decode([]byte("apiVersion: apps/v1\nkind: Deploymnet\nmetadata: {name: x}\n"))
	if err == nil || !strings.Contains(err.Error(), "unknown kind") {
		t.Fatalf("got %v", err)
	}
}

// One render of the chart: its objects by kind.
type render struct {
	name       string
	deployment *appsv1.Deployment
	services   []*corev1.Service
	pdbs       []*policyv1.PodDisruptionBudget
	policies   []*networkingv1.NetworkPolicy
	secrets    map[string]*corev1.Secret
	configMaps map[string]*corev1.ConfigMap
	claims     map[string]*corev1.PersistentVolumeClaim
	accounts   map[string]*corev1.ServiceAccount
}

func loadRender(t *testing.T, path string) render {
	r := render{
		name:       strings.TrimSuffix(filepath.Base(path), ".yaml"),
		secrets:    map[string]*corev1.Secret{},
		configMaps: map[string]*corev1.ConfigMap{},
		claims:     map[string]*corev1.PersistentVolumeClaim{},
		accounts:   map[string]*corev1.ServiceAccount{},
	}
	for _, obj := range decodeFile(t, path) {
		switch o := obj.(type) {
		case *appsv1.Deployment:
			if r.deployment != nil {
				t.Fatalf("%s: two Deployments", path)
			}
			r.deployment = o
		case *corev1.Service:
			r.services = append(r.services, o)
		case *policyv1.PodDisruptionBudget:
			r.pdbs = append(r.pdbs, o)
		case *networkingv1.NetworkPolicy:
			r.policies = append(r.policies, o)
		case *corev1.Secret:
			r.secrets[o.Name] = o
		case *corev1.ConfigMap:
			r.configMaps[o.Name] = o
		case *corev1.PersistentVolumeClaim:
			r.claims[o.Name] = o
		case *corev1.ServiceAccount:
			r.accounts[o.Name] = o
		default:
			t.Fatalf("%s: unexpected %T", path, obj)
		}
	}
	if r.deployment == nil || len(r.services) != 1 || len(r.pdbs) != 1 || len(r.policies) != 1 {
		t.Fatalf("%s: want one Deployment, Service, PodDisruptionBudget and NetworkPolicy", path)
	}
	return r
}

func stepdContainer(t *testing.T, pod *corev1.PodSpec) *corev1.Container {
	t.Helper()
	for i := range pod.Containers {
		if pod.Containers[i].Name == "stepd" {
			return &pod.Containers[i]
		}
	}
	t.Fatal("no container named stepd")
	return nil
}

// flags parses `--name=value` and `--name` arguments.
func flags(t *testing.T, args []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, arg := range args {
		if !strings.HasPrefix(arg, "--") {
			t.Fatalf("argument %q is not a --flag", arg)
		}
		name, value, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if _, dup := out[name]; dup && name != "redact" {
			t.Fatalf("--%s given twice", name)
		}
		out[name] = value
	}
	return out
}

func port(t *testing.T, addr string) int32 {
	t.Helper()
	i := strings.LastIndex(addr, ":")
	p, err := strconv.Atoi(addr[i+1:])
	if i < 0 || err != nil {
		t.Fatalf("no port in %q", addr)
	}
	return int32(p)
}

// mountFor returns the mount holding path, the deepest one.
func mountFor(c *corev1.Container, path string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		if path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			if best == nil || len(m.MountPath) > len(best.MountPath) {
				best = m
			}
		}
	}
	return best
}

func TestTheChartsRules(t *testing.T) {
	for _, path := range files(t, renders) {
		r := loadRender(t, path)
		t.Run(r.name, func(t *testing.T) { checkRender(t, r) })
	}
}

func checkRender(t *testing.T, r render) {
	d := r.deployment
	pod := &d.Spec.Template.Spec
	c := stepdContainer(t, pod)
	f := flags(t, c.Args)
	podLabels := labels.Set(d.Spec.Template.Labels)

	_, cluster := f["advertise-address"]
	if cluster {
		checkCluster(t, r, c, f)
	} else if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		// One daemon per SQLite database: never two pods at once.
		t.Error("want one replica and the Recreate strategy")
	}
	checkDrain(t, pod, f)
	if sel := labels.SelectorFromSet(d.Spec.Selector.MatchLabels); !sel.Matches(podLabels) {
		t.Error("the Deployment's selector does not match its pods")
	}

	// Hardening.
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Error("the pod must run as a numeric non-root uid")
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("the pod's seccomp profile must be RuntimeDefault")
	}
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("stepd has no securityContext")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("stepd's root file system must be read-only")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("stepd must not escalate privileges")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("stepd must run as non-root")
	case sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0:
		t.Error("stepd must drop ALL capabilities and add none")
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("stepd's seccomp profile must be RuntimeDefault")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("stepd does not call the API: no service account token")
	}
	if _, ok := r.accounts[pod.ServiceAccountName]; !ok {
		t.Errorf("service account %q is not in the render", pod.ServiceAccountName)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Error("stepd needs cpu and memory requests and a memory limit")
	}

	// Ports and probes: the kubelet's gRPC probe on the health listener.
	grpcPort, healthPort := port(t, f["listen"]), port(t, f["health-listen"])
	named := map[string]int32{}
	for _, p := range c.Ports {
		named[p.Name] = p.ContainerPort
	}
	if named["grpc"] != grpcPort || named["health"] != healthPort {
		t.Errorf("container ports %v do not match --listen and --health-listen", named)
	}
	for name, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if probe == nil || probe.GRPC == nil || probe.GRPC.Port != healthPort {
			t.Errorf("the %s probe must be a grpc probe on the health port %d", name, healthPort)
		}
	}

	// The Service.
	svc := r.services[0]
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Error("the Service's selector does not match the pods")
	}
	if len(svc.Spec.Ports) != 1 {
		t.Fatalf("want one Service port, got %d", len(svc.Spec.Ports))
	}
	sp := svc.Spec.Ports[0]
	if sp.Name != "grpc" || sp.TargetPort.String() != "grpc" || sp.AppProtocol == nil {
		t.Error("the Service port must be named grpc, target the grpc container port and have an appProtocol")
	}

	// PodDisruptionBudget and NetworkPolicy select the pods.
	if sel, err := metaSelector(r.pdbs[0].Spec.Selector); err != nil || !sel.Matches(podLabels) {
		t.Error("the PodDisruptionBudget does not select the pods")
	}
	if sel, err := metaSelector(&r.policies[0].Spec.PodSelector); err != nil || !sel.Matches(podLabels) {
		t.Error("the NetworkPolicy does not select the pods")
	}
	policed := map[int32]bool{}
	for _, rule := range r.policies[0].Spec.Ingress {
		for _, p := range rule.Ports {
			policed[p.Port.IntVal] = true
		}
	}
	if !policed[grpcPort] || !policed[healthPort] || len(policed) != 2 {
		t.Errorf("the NetworkPolicy must admit the grpc and health ports alone, admits %v", policed)
	}

	// Volumes: every mount has its volume, every file flag is on a mount,
	// the data directory on a writable one.
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok {
			t.Errorf("mount %q has no volume", m.Name)
		}
	}
	if m := mountFor(c, "/tmp/x"); m == nil || m.ReadOnly {
		t.Error("/tmp must be a writable volume")
	}
	data := mountFor(c, f["data-dir"])
	if data == nil || data.ReadOnly || data.MountPath == f["data-dir"] {
		// stepd makes its data directory 0700 itself, which it cannot do to
		// a mount point it does not own: the directory is inside the volume.
		t.Errorf("--data-dir %s must be a directory inside a writable volume", f["data-dir"])
	}
	for _, flag := range []string{"auth-tokens", "tls-cert", "tls-key", "tls-client-ca", "tls-client-roles", "peer-token-file"} {
		file, ok := f[flag]
		if !ok {
			continue
		}
		m := mountFor(c, file)
		if m == nil || !m.ReadOnly {
			t.Errorf("--%s %s is not on a read-only mount", flag, file)
			continue
		}
		checkSource(t, r, volumes[m.Name], strings.TrimPrefix(file, m.MountPath+"/"))
	}
	if _, ok := f["auth-tokens"]; !ok {
		t.Error("no --auth-tokens")
	}

	// The modes.
	_, insecure := f["insecure"]
	_, tlsCert := f["tls-cert"]
	_, clientCA := f["tls-client-ca"]
	_, forwarded := f["trust-forwarded-client-cert"]
	switch r.name {
	case "tls", "mtls":
		if !tlsCert || insecure || forwarded || clientCA != (r.name == "mtls") || *sp.AppProtocol != "tls" {
			t.Errorf("%s mode: want --tls-cert%s, no --insecure, appProtocol tls; args %v, appProtocol %s",
				r.name, map[bool]string{true: " --tls-client-ca"}[r.name == "mtls"], c.Args, *sp.AppProtocol)
		}
	case "mesh", "cluster":
		if !insecure || !forwarded || tlsCert || *sp.AppProtocol != "grpc" {
			t.Errorf("mesh mode: want --insecure --trust-forwarded-client-cert, no TLS, appProtocol grpc; args %v", c.Args)
		}
		annotations := d.Spec.Template.Annotations
		want := strconv.Itoa(int(healthPort))
		if annotations["traffic.sidecar.istio.io/excludeInboundPorts"] != want || annotations["config.linkerd.io/skip-inbound-ports"] != want {
			t.Error("mesh mode: the health port must skip the sidecar")
		}
	default:
		t.Errorf("no rules for a render named %s", r.name)
	}
	if _, roles := f["tls-client-roles"]; roles && !clientCA && !forwarded {
		t.Error("--tls-client-roles without client identities: stepd would refuse to start")
	}
	checkFlagsAreStepds(t, f, c.Env)
}

// Secrets the chart's ci values expect to exist rather than render: the TLS
// Secret (tls.secretName's default) and mesh-values.yaml's existing tokens.
// cluster-values.yaml's database URL and peer token are Secrets too.
var existingSecrets = map[string]bool{
	"stepd-tls": true, "stepd-tokens": true, "stepd-database": true, "stepd-peer-token": true,
}

// checkCluster checks the PostgreSQL replica mode (docs/cluster.md):
// several replicas rolled one by one, the database URL from a Secret (never
// in the arguments), each replica advertising its pod IP on the gRPC port,
// a peer token, a data directory of its own, a PodDisruptionBudget that
// keeps some replicas serving, and peers admitted to one another's gRPC port.
func checkCluster(t *testing.T, r render, c *corev1.Container, f map[string]string) {
	t.Helper()
	d := r.deployment
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Error("cluster mode: want at least two replicas")
	}
	ru := d.Spec.Strategy.RollingUpdate
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Error("cluster mode: want a RollingUpdate that starts a replica before it stops one")
	}
	if _, ok := f["database-url"]; ok {
		t.Error("cluster mode: the database URL (with its password) must not be an argument")
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	url := env["STEPD_DATABASE_URL"].ValueFrom
	if url == nil || url.SecretKeyRef == nil || !existingSecrets[url.SecretKeyRef.Name] {
		t.Error("cluster mode: STEPD_DATABASE_URL must come from an existing Secret")
	}
	ip := env["POD_IP"].ValueFrom
	if ip == nil || ip.FieldRef == nil || ip.FieldRef.FieldPath != "status.podIP" {
		t.Error("cluster mode: POD_IP must be the pod's IP")
	}
	if want := fmt.Sprintf("$(POD_IP):%d", port(t, f["listen"])); f["advertise-address"] != want {
		t.Errorf("cluster mode: --advertise-address %q, want %q", f["advertise-address"], want)
	}
	if _, ok := f["peer-token-file"]; !ok {
		if _, ok := f["peer-tls-cert"]; !ok {
			t.Error("cluster mode: replicas need peer credentials (--peer-token-file or --peer-tls-cert)")
		}
	}
	if len(r.claims) != 0 || d.Spec.Template.Spec.Volumes[0].EmptyDir == nil {
		t.Error("cluster mode: each replica's data directory is its own emptyDir, not a shared claim")
	}
	pdb := r.pdbs[0].Spec
	switch {
	case pdb.MaxUnavailable != nil && pdb.MaxUnavailable.IntValue() >= int(*d.Spec.Replicas):
		t.Error("cluster mode: the PodDisruptionBudget lets every replica go at once")
	case pdb.MinAvailable != nil && (pdb.MinAvailable.IntValue() < 1 || pdb.MinAvailable.IntValue() >= int(*d.Spec.Replicas)):
		t.Error("cluster mode: the PodDisruptionBudget must keep at least one replica and let one go")
	case pdb.MaxUnavailable == nil && pdb.MinAvailable == nil:
		t.Error("cluster mode: the PodDisruptionBudget bounds nothing")
	}
	podLabels := labels.Set(d.Spec.Template.Labels)
	peers := false
	for _, rule := range r.policies[0].Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port.IntVal != port(t, f["listen"]) {
				continue
			}
			for _, from := range rule.From {
				if from.PodSelector != nil && from.NamespaceSelector == nil {
					if sel, err := metaSelector(from.PodSelector); err == nil && sel.Matches(podLabels) {
						peers = true
					}
				}
			}
		}
	}
	if !peers {
		t.Error("cluster mode: the NetworkPolicy must admit the replicas to one another's gRPC port")
	}
}

// checkDrain checks that the pod's grace period outlasts stepd's drain and
// the exit after it, so SIGKILL does not cut a drain short.
func checkDrain(t *testing.T, pod *corev1.PodSpec, f map[string]string) {
	t.Helper()
	drain, err := time.ParseDuration(f["drain-timeout"])
	if err != nil {
		t.Fatalf("--drain-timeout %q: %v", f["drain-timeout"], err)
	}
	grace := pod.TerminationGracePeriodSeconds
	if grace == nil || time.Duration(*grace)*time.Second < drain+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v must be at least --drain-timeout %v + 10s", grace, drain)
	}
}

func metaSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(s)
}

// checkSource checks that a file a flag names comes from its volume: a key
// of a Secret or ConfigMap the render makes (or one it is told exists).
func checkSource(t *testing.T, r render, v corev1.Volume, key string) {
	t.Helper()
	switch {
	case v.Secret != nil:
		if s, ok := r.secrets[v.Secret.SecretName]; ok {
			if _, has := s.StringData[key]; !has {
				if _, has := s.Data[key]; !has {
					t.Errorf("Secret %s has no key %s", s.Name, key)
				}
			}
		} else if !existingSecrets[v.Secret.SecretName] {
			t.Errorf("Secret %s is neither rendered nor one the ci values say exists", v.Secret.SecretName)
		}
	case v.ConfigMap != nil:
		cm, ok := r.configMaps[v.ConfigMap.Name]
		if !ok {
			t.Errorf("ConfigMap %s is not in the render", v.ConfigMap.Name)
		} else if _, has := cm.Data[key]; !has {
			t.Errorf("ConfigMap %s has no key %s", cm.Name, key)
		}
	default:
		t.Errorf("volume %s is not a Secret or a ConfigMap", v.Name)
	}
}

// checkFlagsAreStepds checks every flag, and every STEPD_ variable, against
// `stepd --help` of the binary deploy/build.sh installed ($STEPD_BIN), so
// the chart cannot pass a flag or a variable stepd does not have.
func checkFlagsAreStepds(t *testing.T, f map[string]string, env []corev1.EnvVar) {
	t.Helper()
	bin := os.Getenv("STEPD_BIN")
	if bin == "" {
		t.Log("STEPD_BIN is not set: flags not checked against stepd --help")
		return
	}
	help, err := exec.Command(bin, "--help").Output()
	if err != nil {
		t.Fatalf("%s --help: %v", bin, err)
	}
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(help), -1) {
		known[m[1]] = true
	}
	if !known["listen"] {
		t.Fatalf("no --listen in %s --help", bin)
	}
	for name := range f {
		if !known[name] {
			t.Errorf("stepd has no --%s", name)
		}
	}
	for _, e := range env {
		if strings.HasPrefix(e.Name, "STEPD_") && !strings.Contains(string(help), "[env: "+e.Name+"=") {
			t.Errorf("stepd reads no %s", e.Name)
		}
	}
}

func TestTheSidecarExample(t *testing.T) {
	objs := decodeFile(t, "../examples/sidecar.yaml")
	d, ok := objs[0].(*appsv1.Deployment)
	if !ok || len(objs) != 1 {
		t.Fatal("want one Deployment")
	}
	pod := &d.Spec.Template.Spec
	if pod.ShareProcessNamespace == nil || !*pod.ShareProcessNamespace {
		t.Error("the sidecar needs shareProcessNamespace: true to see the application's process")
	}
	c := stepdContainer(t, pod)
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Add) != 1 || sc.Capabilities.Add[0] != "SYS_PTRACE" ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Error("the stepd sidecar must drop ALL and add SYS_PTRACE alone")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("the stepd sidecar must keep a read-only root and no privilege escalation")
	}
	f := flags(t, c.Args)
	if m := mountFor(c, f["data-dir"]); m == nil || m.ReadOnly || m.MountPath == f["data-dir"] {
		t.Error("--data-dir must be inside a writable volume")
	}
	checkFlagsAreStepds(t, f, c.Env)
}
