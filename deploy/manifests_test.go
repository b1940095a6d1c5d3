package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The chart, and the manifests it renders with the default values for a
// release named grid in namespace default.
const (
	chartDir  = "helm/l4xg-grid"
	manifests = "kubernetes/l4xg-grid.yaml"
	release   = "grid"
)

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor the
// chart writes (its Go types live in the operator's module): a field the
// chart writes that this does not know fails the strict decode too.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port      string `json:"port"`
			Path      string `json:"path"`
			Interval  string `json:"interval"`
			Scheme    string `json:"scheme"`
			TLSConfig *struct {
				CA struct {
					Secret corev1.SecretKeySelector `json:"secret"`
				} `json:"ca"`
			} `json:"tlsConfig"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// decodeStrict decodes every document of a multi-document YAML stream into
// the Kubernetes API type of its kind, refusing any field the type does not
// have (a misspelt spec.replcas fails), and returns the objects by kind.
func decodeStrict(data []byte) (map[string][]any, error) {
	out := map[string][]any{}
	for i, doc := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var obj any
		switch meta.APIVersion + "/" + meta.Kind {
		case "apps/v1/StatefulSet":
			obj = &appsv1.StatefulSet{}
		case "v1/Service":
			obj = &corev1.Service{}
		case "v1/ConfigMap":
			obj = &corev1.ConfigMap{}
		case "policy/v1/PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		case "monitoring.coreos.com/v1/ServiceMonitor":
			obj = &serviceMonitor{}
		default:
			return nil, fmt.Errorf("document %d: unexpected %s %s", i, meta.APIVersion, meta.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i, meta.Kind, err)
		}
		out[meta.Kind] = append(out[meta.Kind], obj)
	}
	return out, nil
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.Bytes()
}

// TestManifestsStrict: the committed manifests decode strictly into the
// API types, and hold what the chart promises: a Parallel StatefulSet
// whose node id is the pod name, joining through the headless Service that
// publishes pods not ready yet, the probes on /readyz and /healthz, a PDB
// of one, anti-affinity, and volume claims.
func TestManifestsStrict(t *testing.T) {
	data, err := os.ReadFile(manifests)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeStrict(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs["StatefulSet"]) != 1 || len(objs["Service"]) != 2 || len(objs["PodDisruptionBudget"]) != 1 || len(objs["ConfigMap"]) != 1 {
		t.Fatalf("objects: %v", kinds(objs))
	}
	sts := objs["StatefulSet"][0].(*appsv1.StatefulSet)
	pod := sts.Spec.Template.Spec
	c := pod.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"3 replicas", sts.Spec.Replicas != nil && *sts.Spec.Replicas == 3},
		{"Parallel pod management", sts.Spec.PodManagementPolicy == appsv1.ParallelPodManagement},
		{"the node id is the pod name", env["GRID_NODE_ID"] == "$(POD_NAME)"},
		{"gossip advertises the pod IP", strings.HasPrefix(env["GRID_GOSSIP_ADVERTISE"], "$(POD_IP):")},
		{"readiness on /readyz", c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet.Path == "/readyz"},
		{"liveness on /healthz", c.LivenessProbe != nil && c.LivenessProbe.HTTPGet.Path == "/healthz"},
		{"a grace period for the hand-over", pod.TerminationGracePeriodSeconds != nil && *pod.TerminationGracePeriodSeconds >= 30},
		{"required anti-affinity across nodes", pod.Affinity != nil && pod.Affinity.PodAntiAffinity != nil &&
			len(pod.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 1},
		{"a volume claim template", len(sts.Spec.VolumeClaimTemplates) == 1},
		{"non-root", pod.SecurityContext != nil && pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("StatefulSet: not %s", c.what)
		}
	}
	headless := false
	for _, o := range objs["Service"] {
		s := o.(*corev1.Service)
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = s.Spec.PublishNotReadyAddresses && s.Name == sts.Spec.ServiceName
		}
	}
	if !headless {
		t.Error("no headless Service publishing not-ready pods under the StatefulSet's serviceName")
	}
	pdb := objs["PodDisruptionBudget"][0].(*policyv1.PodDisruptionBudget)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PDB maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
	}
	cm := objs["ConfigMap"][0].(*corev1.ConfigMap)
	for _, want := range []string{"bootstrap-expect: 3", "grid-l4xg-grid-2.grid-l4xg-grid-peers.default.svc:7422"} {
		if !strings.Contains(cm.Data["grid.yaml"], want) {
			t.Errorf("grid.yaml lacks %q:\n%s", want, cm.Data["grid.yaml"])
		}
	}
}

// TestManifestsStrictRefusesUnknownFields: the strict decode is what
// catches a misspelt field, here spec.replcas.
func TestManifestsStrictRefusesUnknownFields(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "misspelt.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = decodeStrict(data)
	if err == nil || !strings.Contains(err.Error(), "replcas") {
		t.Fatalf("a StatefulSet with spec.replcas: %v, want an error naming the field", err)
	}
}

// TestChartRendersTheManifests: helm lint passes, the chart rendered with
// the default values is the committed manifests byte for byte, and renders
// with other values (five nodes, soft anti-affinity, a ServiceMonitor)
// decode strictly too.
func TestChartRendersTheManifests(t *testing.T) {
	helm := needTool(t, "helm", "go install helm.sh/helm/v4/cmd/helm@v4.3.2")
	if out, err := exec.Command(helm, "lint", chartDir).CombinedOutput(); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
	render := func(set ...string) []byte {
		args := []string{"template", release, chartDir, "--namespace", "default"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out, err := exec.Command(helm, args...).Output()
		if err != nil {
			t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	committed, err := os.ReadFile(manifests)
	if err != nil {
		t.Fatal(err)
	}
	if got := render(); !bytes.Equal(got, committed) {
		t.Errorf("%s is not what the chart renders: run\n\thelm template %s deploy/%s --namespace default > deploy/%s", manifests, release, chartDir, manifests)
	}
	objs, err := decodeStrict(render("replicaCount=5", "antiAffinity=soft", "serviceMonitor.enabled=true", "shards=8", "config.extra.inflight-entries=2"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs["ServiceMonitor"]) != 1 {
		t.Errorf("objects with serviceMonitor.enabled: %v", kinds(objs))
	}
	sts := objs["StatefulSet"][0].(*appsv1.StatefulSet)
	if *sts.Spec.Replicas != 5 || sts.Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		t.Errorf("replicaCount=5 antiAffinity=soft rendered %d replicas, required anti-affinity %v", *sts.Spec.Replicas,
			sts.Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
	}
	cm := objs["ConfigMap"][0].(*corev1.ConfigMap).Data["grid.yaml"]
	for _, want := range []string{"bootstrap-expect: 5", "shards: 8", "inflight-entries: 2", "grid-l4xg-grid-4.grid-l4xg-grid-peers"} {
		if !strings.Contains(cm, want) {
			t.Errorf("grid.yaml lacks %q:\n%s", want, cm)
		}
	}

	// TLS and tokens from Secrets: the files mounted, the flags set by
	// their GRID_* variables, the probes and the scrape over HTTPS.
	objs, err = decodeStrict(render("tls.enabled=true", "tls.secretName=grid-tls", "auth.enabled=true", "auth.secretName=grid-auth",
		"serviceMonitor.enabled=true", "auth.rateLimitPerNamespace=500"))
	if err != nil {
		t.Fatal(err)
	}
	sts = objs["StatefulSet"][0].(*appsv1.StatefulSet)
	pod := sts.Spec.Template.Spec
	env := map[string]string{}
	for _, e := range pod.Containers[0].Env {
		env[e.Name] = e.Value
	}
	for k, v := range map[string]string{
		"GRID_CERT_FILE": "/etc/gridnode/tls/tls.crt", "GRID_PEER_TRUSTED_CA_FILE": "/etc/gridnode/tls/ca.crt",
		"GRID_AUTH_TOKENS_FILE": "/etc/gridnode/auth/tokens.yaml", "GRID_AUTH_NODE_TOKEN_FILE": "/etc/gridnode/auth/node.token",
		"GRID_RATE_LIMIT_PER_NAMESPACE": "500",
		// What the documented kubectl exec ... gridnode drain needs, with
		// TLS and tokens on (cmd/gridnode TestCLIWithAPodsEnvironment runs the CLI so).
		"GRID_ADDR":   "$(POD_NAME).grid-l4xg-grid-peers.default.svc:7420",
		"GRID_CACERT": "/etc/gridnode/tls/ca.crt", "GRID_CERT": "/etc/gridnode/tls/tls.crt", "GRID_CERT_KEY": "/etc/gridnode/tls/tls.key",
		"GRID_AUTH_TOKEN_FILE": "/etc/gridnode/auth/node.token",
	} {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	secrets := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			secrets[v.Secret.SecretName] = true
		}
	}
	if !secrets["grid-tls"] || !secrets["grid-auth"] {
		t.Errorf("secret volumes %v, want grid-tls and grid-auth", secrets)
	}
	if p := pod.Containers[0].ReadinessProbe.HTTPGet; p.Scheme != corev1.URISchemeHTTPS {
		t.Errorf("readiness probe scheme %q with TLS, want HTTPS", p.Scheme)
	}
	if sm := objs["ServiceMonitor"][0].(*serviceMonitor); sm.Spec.Endpoints[0].Scheme != "https" {
		t.Errorf("ServiceMonitor scheme %q with TLS, want https", sm.Spec.Endpoints[0].Scheme)
	}
	if _, err := exec.Command(helm, "template", release, chartDir, "--set", "tls.enabled=true").CombinedOutput(); err == nil {
		t.Error("tls.enabled without tls.secretName rendered; want the chart to refuse it")
	}
}

// TestChartConfigValidates: the grid.yaml the chart writes is accepted by
// gridnode config validate, with the pod's own settings as the StatefulSet
// gives them in its environment.
func TestChartConfigValidates(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gridnode")
	}
	data, err := os.ReadFile(manifests)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeStrict(data)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "grid.yaml")
	if err := os.WriteFile(file, []byte(objs["ConfigMap"][0].(*corev1.ConfigMap).Data["grid.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gridnode(t), "config", "print", "--config", file)
	cmd.Env = append(os.Environ(), "GRID_NODE_ID=grid-l4xg-grid-0", "GRID_GOSSIP_ADVERTISE=10.1.2.3:7422",
		"GRID_RAFT_ADVERTISE=grid-l4xg-grid-0.grid-l4xg-grid-peers.default.svc:7421")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("config print of the chart's grid.yaml: %v\n%s", err, out)
	}
}

func kinds(objs map[string][]any) map[string]int {
	out := map[string]int{}
	for k, v := range objs {
		out[k] = len(v)
	}
	return out
}
