// Package helmchart tests the Helm chart in bootops/: helm's own lint and
// rendering (helm.sh/helm/v3 as a library), and every rendered object
// checked by Kubernetes' own code: strict decoding into the typed API
// objects, the API server's ObjectMeta and label validation, and the
// structured schema server-side apply checks objects against.
package helmchart

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/applyconfigurations"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

var update = flag.Bool("update", false, "rewrite testdata/serve-config/*.yaml from the rendered ConfigMaps")

const (
	chartDir  = "bootops"
	namespace = "provisioning"
	release   = "site"
	stateDir  = "/var/lib/bootops"
)

// Values that must never appear outside a Secret.
const (
	gitToken    = "s3cr3t-git-token"
	sshKey      = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAAsecretkey\n-----END OPENSSH PRIVATE KEY-----\n"
	hookSecret  = "s3cr3t-hook"
	uiToken     = "s3cr3t-ui-token"
	bmcPassword = "admin:s3cr3t-bmc\nallow: 10.0.0.0/24\n"
	viewToken   = "s3cr3t-view-token"
)

// valueSets are the values each good case installs with.
var valueSets = map[string]string{
	// The chart's defaults and the one value with none.
	"defaults": `
serve:
  config:
    source: https://git.example.com/ops/fleet.git
`,
	// Everything on: hub of three, ServiceMonitor, existing Secrets.
	"everything": `
image:
  digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
serve:
  config:
    source: ssh://git@git.example.com/ops/fleet.git
    ref: main
    site: [store-0042]
    interval: 1m
    dhcp: proxy
    interface: eno2
    log-level: debug
    compile-memory: 1GiB
    new-machines-burst: 40
    allow-empty: false
    bmc-allow: 10.0.0.0/24
  httpsPort: 8443
  netRaw: true
  verifyCommitsKeys: |
    -----BEGIN PGP PUBLIC KEY BLOCK-----
    mQENBF1
    -----END PGP PUBLIC KEY BLOCK-----
  nodeSelector:
    bootops.dev/provisioning-lan: "true"
  tolerations:
    - key: dedicated
      operator: Equal
      value: provisioning
      effect: NoSchedule
  podAnnotations:
    example.com/team: edge
persistence:
  existingClaim: bootops-state
git:
  username: deploy
  existingSecret: fleet-git
  existingSecretKeys:
    password: ""
    sshKey: id_ed25519
    knownHosts: known_hosts
webhook:
  existingSecret: fleet-hook
ui:
  existingSecret: bootops-ui
  existingSecretKey: token
bmc:
  existingSecret: store-0042-bmc
metrics:
  serviceMonitor:
    enabled: true
    labels:
      release: prometheus
hub:
  enabled: true
  replicas: 3
  sites:
    store-0042: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4
  tls:
    existingSecret: hub-tls
  clusterTLS:
    existingSecret: hub-routes
  existingSecret: hub-view
  extraArgs: ["--site-max-machines", "40000"]
  storage:
    storageClass: fast
    size: 20Gi
`,
	// Secrets given as values: the chart makes the Secrets.
	"inline-secrets": `
serve:
  config:
    source: https://git.example.com/ops/fleet.git
    site: store-0042
git:
  password: ` + gitToken + `
  sshKey: ` + yamlQuote(sshKey) + `
  knownHosts: "git.example.com ssh-ed25519 AAAAC3Nza"
webhook:
  secret: ` + hookSecret + `
ui:
  token: ` + uiToken + `
bmc:
  credentials:
    rack1: ` + yamlQuote(bmcPassword) + `
`,
	// A hub alone, one server, in a central cluster.
	"hub-only": `
serve:
  enabled: false
hub:
  enabled: true
  replicas: 1
  tls:
    existingSecret: hub-tls
  viewToken: ` + viewToken + `
`,
	// HTTP only, as the image's user.
	"non-root": `
serve:
  config:
    source: https://git.example.com/ops/fleet.git
    dhcp: "off"
  tftp: false
  runAsNonRoot: true
persistence:
  enabled: false
`,
}

// badValueSets must be refused by install; each error must say what is
// wrong. Those the schema refuses (schema: true) fail helm lint too; a
// template's fail is only an INFO to helm lint.
var badValueSets = map[string]struct {
	values, want string
	schema       bool
}{
	"no source":              {``, "serve.config.source is required", false},
	"chart-owned key":        {"serve:\n  config:\n    source: x\n    state-dir: /tmp\n", "state-dir", true},
	"unknown serve key":      {"serve:\n  config:\n    source: x\n    intervall: 1m\n", "intervall", true},
	"bad dhcp mode":          {"serve:\n  config:\n    source: x\n    dhcp: on\n", "dhcp", true},
	"bad duration":           {"serve:\n  config:\n    source: x\n    interval: soon\n", "interval", true},
	"port as text":           {"serve:\n  config:\n    source: x\n  httpPort: eighty\n", "httpPort", true},
	"hub of two":             {"serve:\n  config:\n    source: x\nhub:\n  enabled: true\n  replicas: 2\n", "replicas", true},
	"bad digest":             {"serve:\n  config:\n    source: x\nimage:\n  digest: sha256:xyz\n", "digest", true},
	"unknown top value":      {"serve:\n  config:\n    source: x\nreplicaCount: 2\n", "replicaCount", true},
	"hub without tls":        {"serve:\n  config:\n    source: x\nhub:\n  enabled: true\n  viewToken: t\n", "hub.tls.existingSecret is required", false},
	"hub without token":      {"serve:\n  config:\n    source: x\nhub:\n  enabled: true\n  replicas: 1\n  tls:\n    existingSecret: t\n", "hub.viewToken or hub.existingSecret is required", false},
	"hub routes without tls": {"serve:\n  config:\n    source: x\nhub:\n  enabled: true\n  viewToken: t\n  tls:\n    existingSecret: t\n", "hub.clusterTLS.existingSecret is required", false},
	"non-root with dhcp":     {"serve:\n  config:\n    source: x\n  runAsNonRoot: true\n  tftp: false\n", "serve.runAsNonRoot=true needs", false},
	"bad site key":           {"serve:\n  config:\n    source: x\nhub:\n  sites:\n    s1: not-a-key\n", "sites", true},
}

// enabled is a value set's COMPONENT.enabled, def when unset.
func enabled(t *testing.T, name, component string, def bool) bool {
	v, err := chartutil.ReadValues([]byte(valueSets[name]))
	if err != nil {
		t.Fatal(err)
	}
	on, err := v.PathValue(component + ".enabled")
	if err != nil {
		return def
	}
	return on == true
}

// yamlQuote quotes s for a YAML value: Go's double-quoted strings are
// YAML's for the ASCII text here.
func yamlQuote(s string) string { return strconv.Quote(s) }

func parseValues(t *testing.T, text string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(text))
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	return v
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load %s: %v", chartDir, err)
	}
	return c
}

// render is `helm template` with the values: schema validation, then the
// engine in strict mode (a missing value is an error).
func render(c *chart.Chart, vals map[string]any) (map[string]string, error) {
	rv, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Engine{Strict: true}.Render(c, rv)
}

// lintMessages is `helm lint` with the values: what it says at warning
// level or above.
func lintMessages(vals map[string]any) []support.Message {
	var out []support.Message
	for _, m := range lint.All(chartDir, vals, namespace, false).Messages {
		if m.Severity >= support.WarningSev {
			out = append(out, m)
		}
	}
	return out
}

func TestLint(t *testing.T) {
	for _, name := range []string{"defaults", "everything", "inline-secrets", "hub-only", "non-root"} {
		t.Run(name, func(t *testing.T) {
			if msgs := lintMessages(parseValues(t, valueSets[name])); len(msgs) > 0 {
				t.Errorf("helm lint: %v", msgs)
			}
		})
	}
	// The chart's values alone: serve.config.source has no default, which
	// install refuses (TestBadValuesRefused) and lint, for which a
	// template's fail is no error, passes.
	if msgs := lintMessages(nil); len(msgs) > 0 {
		t.Errorf("helm lint of the bare chart: %v", msgs)
	}
}

func TestBadValuesRefused(t *testing.T) {
	c := loadChart(t)
	for name, bad := range badValueSets {
		t.Run(name, func(t *testing.T) {
			_, err := render(c, parseValues(t, bad.values))
			if err == nil {
				t.Fatalf("values accepted:\n%s", bad.values)
			}
			if !strings.Contains(err.Error(), bad.want) {
				t.Errorf("error does not name %q: %v", bad.want, err)
			}
			if !bad.schema {
				return
			}
			var errs int
			for _, m := range lintMessages(parseValues(t, bad.values)) {
				if m.Severity == support.ErrorSev && strings.Contains(m.Error(), bad.want) {
					errs++
				}
			}
			if errs == 0 {
				t.Errorf("helm lint found no error naming %q", bad.want)
			}
		})
	}
}

// rendered is one value set's objects by kind/name.
type rendered struct {
	objs  map[string]runtime.Object
	order []string
}

func (r rendered) get(kind, name string) runtime.Object { return r.objs[kind+"/"+name] }

func (r rendered) count(kind string) int {
	n := 0
	for _, k := range r.order {
		if strings.HasPrefix(k, kind+"/") {
			n++
		}
	}
	return n
}

func TestRenderedObjectsValid(t *testing.T) {
	c := loadChart(t)
	for _, name := range sortedKeys(valueSets) {
		t.Run(name, func(t *testing.T) {
			out, err := render(c, parseValues(t, valueSets[name]))
			if err != nil {
				t.Fatal(err)
			}
			r := validateAll(t, out)
			t.Logf("%s: %d objects validated (%s)", name, len(r.order), strings.Join(r.order, ", "))
			checkServe(t, name, r)
			checkHub(t, name, r)
			checkNoSecretsOutsideSecrets(t, r)
		})
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// newScheme knows the built-in kinds and the Prometheus Operator's.
func newScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := monitoringv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// validateAll decodes every rendered manifest strictly and validates it.
func validateAll(t *testing.T, out map[string]string) rendered {
	t.Helper()
	scheme := newScheme(t)
	strict := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme, kjson.SerializerOptions{Yaml: true, Strict: true})
	// The schema server-side apply checks built-in objects against,
	// generated from Kubernetes' OpenAPI.
	smd := applyconfigurations.NewTypeConverter(clientgoscheme.Scheme)
	r := rendered{objs: map[string]runtime.Object{}}
	for _, file := range sortedKeys(out) {
		if !strings.HasSuffix(file, ".yaml") {
			continue
		}
		docs := releaseutil.SplitManifests(out[file])
		keys := sortedKeys(docs)
		sort.Sort(releaseutil.BySplitManifestsOrder(keys))
		for _, k := range keys {
			doc := docs[k]
			obj, gvk, err := strict.Decode([]byte(doc), nil, nil)
			if err != nil {
				t.Errorf("%s: strict decoding: %v\n%s", file, err, doc)
				continue
			}
			acc, err := metaOf(obj)
			if err != nil {
				t.Errorf("%s: %v", file, err)
				continue
			}
			key := gvk.Kind + "/" + acc.GetName()
			if _, dup := r.objs[key]; dup {
				t.Errorf("%s: %s rendered twice", file, key)
			}
			r.objs[key] = obj
			r.order = append(r.order, key)
			if acc.GetNamespace() == "" {
				acc.SetNamespace(namespace) // as helm install sets it
			}
			nameFn := apivalidation.NameIsDNSSubdomain
			if gvk.Kind == "Service" {
				nameFn = apivalidation.NameIsDNS1035Label
			}
			errs := apivalidation.ValidateObjectMetaAccessor(acc, true, nameFn, field.NewPath("metadata"))
			if gvk.Group != monitoringv1.SchemeGroupVersion.Group {
				if _, err := smd.ObjectToTyped(obj); err != nil {
					errs = append(errs, field.Invalid(field.NewPath(""), key, err.Error()))
				}
			}
			errs = append(errs, validateKind(obj)...)
			for _, e := range errs {
				t.Errorf("%s: %s: %v", file, key, e)
			}
		}
	}
	return r
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	acc, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no ObjectMeta", obj)
	}
	return acc, nil
}

// validateKind checks what the API server's validation of each kind
// checks (k8s.io/kubernetes/pkg/apis/*/validation is not importable: see
// the chart README), with apimachinery's validators.
func validateKind(obj runtime.Object) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	workload := func(sel *metav1.LabelSelector, tmpl *corev1.PodTemplateSpec, claims []corev1.PersistentVolumeClaim) {
		errs = append(errs, metavalidation.ValidateLabelSelector(sel, metavalidation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
		errs = append(errs, metavalidation.ValidateLabels(tmpl.Labels, p.Child("template", "metadata", "labels"))...)
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || s.Empty() || !s.Matches(labels.Set(tmpl.Labels)) {
			errs = append(errs, field.Invalid(p.Child("template", "metadata", "labels"), tmpl.Labels, "selector does not match template labels"))
		}
		errs = append(errs, validatePodSpec(&tmpl.Spec, claims, p.Child("template", "spec"))...)
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		workload(o.Spec.Selector, &o.Spec.Template, nil)
	case *appsv1.StatefulSet:
		workload(o.Spec.Selector, &o.Spec.Template, o.Spec.VolumeClaimTemplates)
		if o.Spec.ServiceName == "" {
			errs = append(errs, field.Required(p.Child("serviceName"), ""))
		}
	case *corev1.Service:
		errs = append(errs, metavalidation.ValidateLabels(o.Spec.Selector, p.Child("selector"))...)
		for i, port := range o.Spec.Ports {
			errs = append(errs, validName(port.Name, p.Child("ports").Index(i).Child("name"), validation.IsDNS1123Label)...)
			errs = append(errs, validNum(int(port.Port), p.Child("ports").Index(i).Child("port"))...)
			if port.TargetPort.StrVal != "" {
				errs = append(errs, validName(port.TargetPort.StrVal, p.Child("ports").Index(i).Child("targetPort"), validation.IsValidPortName)...)
			}
		}
	case *corev1.ConfigMap:
		for k := range o.Data {
			errs = append(errs, validName(k, field.NewPath("data"), validation.IsConfigMapKey)...)
		}
	case *corev1.Secret:
		for k := range o.Data {
			errs = append(errs, validName(k, field.NewPath("data"), validation.IsConfigMapKey)...)
		}
	case *corev1.PersistentVolumeClaim:
		if len(o.Spec.AccessModes) == 0 {
			errs = append(errs, field.Required(p.Child("accessModes"), ""))
		}
		if q := o.Spec.Resources.Requests[corev1.ResourceStorage]; q.Sign() <= 0 {
			errs = append(errs, field.Invalid(p.Child("resources", "requests", "storage"), q.String(), "must be more than 0"))
		}
	case *networkingv1.NetworkPolicy:
		errs = append(errs, metavalidation.ValidateLabelSelector(&o.Spec.PodSelector, metavalidation.LabelSelectorValidationOptions{}, p.Child("podSelector"))...)
	case *monitoringv1.ServiceMonitor:
		errs = append(errs, metavalidation.ValidateLabelSelector(&o.Spec.Selector, metavalidation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
	}
	return errs
}

func validName(s string, p *field.Path, fn func(string) []string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range fn(s) {
		errs = append(errs, field.Invalid(p, s, msg))
	}
	return errs
}

func validNum(n int, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsValidPortNum(n) {
		errs = append(errs, field.Invalid(p, n, msg))
	}
	return errs
}

// validatePodSpec checks names, ports, volumes, mounts, env and probes
// as core/v1 validation does.
func validatePodSpec(spec *corev1.PodSpec, claims []corev1.PersistentVolumeClaim, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	vols := map[string]bool{}
	for i, v := range spec.Volumes {
		vp := p.Child("volumes").Index(i)
		errs = append(errs, validName(v.Name, vp.Child("name"), validation.IsDNS1123Label)...)
		if vols[v.Name] {
			errs = append(errs, field.Duplicate(vp.Child("name"), v.Name))
		}
		vols[v.Name] = true
		if s := v.Secret; s != nil {
			if s.DefaultMode != nil && (*s.DefaultMode < 0 || *s.DefaultMode > 0o777) {
				errs = append(errs, field.Invalid(vp.Child("secret", "defaultMode"), *s.DefaultMode, "must be 0..0777"))
			}
			for j, it := range s.Items {
				errs = append(errs, validName(it.Key, vp.Child("secret", "items").Index(j).Child("key"), validation.IsConfigMapKey)...)
				if it.Path == "" || strings.Contains(it.Path, "..") || filepath.IsAbs(it.Path) {
					errs = append(errs, field.Invalid(vp.Child("secret", "items").Index(j).Child("path"), it.Path, "must be a relative path without .."))
				}
			}
		}
	}
	for _, c := range claims {
		if vols[c.Name] {
			errs = append(errs, field.Duplicate(p.Child("volumes"), c.Name))
		}
		vols[c.Name] = true
	}
	for i, c := range spec.Containers {
		cp := p.Child("containers").Index(i)
		errs = append(errs, validName(c.Name, cp.Child("name"), validation.IsDNS1123Label)...)
		ports := map[string]int32{}
		for j, port := range c.Ports {
			pp := cp.Child("ports").Index(j)
			errs = append(errs, validName(port.Name, pp.Child("name"), validation.IsValidPortName)...)
			errs = append(errs, validNum(int(port.ContainerPort), pp.Child("containerPort"))...)
			if spec.HostNetwork && port.HostPort != 0 && port.HostPort != port.ContainerPort {
				errs = append(errs, field.Invalid(pp.Child("hostPort"), port.HostPort, "must match containerPort when hostNetwork is true"))
			}
			ports[port.Name] = port.ContainerPort
		}
		for j, e := range c.Env {
			errs = append(errs, validName(e.Name, cp.Child("env").Index(j).Child("name"), validation.IsEnvVarName)...)
		}
		mounts := map[string]bool{}
		for j, m := range c.VolumeMounts {
			mp := cp.Child("volumeMounts").Index(j)
			if !vols[m.Name] {
				errs = append(errs, field.NotFound(mp.Child("name"), m.Name))
			}
			if !filepath.IsAbs(m.MountPath) || mounts[m.MountPath] {
				errs = append(errs, field.Invalid(mp.Child("mountPath"), m.MountPath, "must be absolute and unique"))
			}
			mounts[m.MountPath] = true
		}
		for _, pr := range []struct {
			name string
			p    *corev1.Probe
		}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}} {
			if pr.p == nil {
				continue
			}
			var port string
			switch {
			case pr.p.HTTPGet != nil:
				port = pr.p.HTTPGet.Port.StrVal
			case pr.p.TCPSocket != nil:
				port = pr.p.TCPSocket.Port.StrVal
			}
			if _, ok := ports[port]; port != "" && !ok {
				errs = append(errs, field.NotFound(cp.Child(pr.name, "port"), port))
			}
		}
	}
	return errs
}

// checkServe: the properties the boot server needs to work and to be
// safe.
func checkServe(t *testing.T, name string, r rendered) {
	t.Helper()
	full := release + "-bootops"
	dep, _ := r.get("Deployment", full).(*appsv1.Deployment)
	if !enabled(t, name, "serve", true) {
		if dep != nil || r.count("ConfigMap") != 1 {
			t.Errorf("serve disabled, yet rendered: %v", r.order)
		}
		return
	}
	if dep == nil {
		t.Fatalf("no Deployment %s in %v", full, r.order)
	}
	spec := dep.Spec.Template.Spec
	if *dep.Spec.Replicas != 1 || dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("replicas %d, strategy %s: want 1, Recreate", *dep.Spec.Replicas, dep.Spec.Strategy.Type)
	}
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v, dnsPolicy %s", spec.HostNetwork, spec.DNSPolicy)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	psc := spec.SecurityContext
	if sc == nil || psc == nil || sc.Capabilities == nil {
		t.Fatal("no securityContext")
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || *sc.Privileged {
		t.Errorf("container securityContext: %+v", sc)
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccompProfile: %+v", psc.SeccompProfile)
	}
	wantCaps := []corev1.Capability{"NET_BIND_SERVICE"}
	switch name {
	case "everything":
		wantCaps = append(wantCaps, "NET_RAW")
	case "non-root":
		wantCaps = nil
		if !*psc.RunAsNonRoot || *psc.RunAsUser != 65532 || *psc.FSGroup != 65532 {
			t.Errorf("non-root: pod securityContext %+v", psc)
		}
	}
	if !slices.Equal(sc.Capabilities.Add, wantCaps) {
		t.Errorf("capabilities added: %v, want %v", sc.Capabilities.Add, wantCaps)
	}

	// Probes on the HTTP listener's port.
	cfgMap, _ := r.get("ConfigMap", full+"-config").(*corev1.ConfigMap)
	if cfgMap == nil {
		t.Fatalf("no ConfigMap %s-config", full)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cfgMap.Data["serve.yaml"]), &cfg); err != nil {
		t.Fatalf("serve.yaml: %v", err)
	}
	httpPort := -1
	for _, p := range c.Ports {
		if p.Name == "http" {
			httpPort = int(p.ContainerPort)
		}
	}
	if cfg["http-addr"] != fmt.Sprintf(":%d", httpPort) {
		t.Errorf("http-addr %v, container port http %d", cfg["http-addr"], httpPort)
	}
	for _, pr := range []struct {
		p    *corev1.Probe
		path string
	}{{c.LivenessProbe, "/healthz"}, {c.ReadinessProbe, "/readyz"}} {
		if pr.p == nil || pr.p.HTTPGet == nil || pr.p.HTTPGet.Path != pr.path || pr.p.HTTPGet.Port.StrVal != "http" {
			t.Errorf("probe: want GET %s on port http, got %+v", pr.path, pr.p)
		}
	}

	// The state folder: mounted where the config says, from the PVC.
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if cfg["state-dir"] != stateDir {
		t.Errorf("state-dir %v", cfg["state-dir"])
	}
	m, ok := mounts[stateDir]
	if !ok || m.ReadOnly {
		t.Fatalf("nothing writable mounted at %s: %v", stateDir, c.VolumeMounts)
	}
	switch name {
	case "everything":
		if pvc := vols[m.Name].PersistentVolumeClaim; pvc == nil || pvc.ClaimName != "bootops-state" || r.count("PersistentVolumeClaim") != 0 {
			t.Errorf("existingClaim: volume %+v, %d PVCs rendered", vols[m.Name], r.count("PersistentVolumeClaim"))
		}
	case "non-root":
		if vols[m.Name].EmptyDir == nil {
			t.Errorf("persistence off: want an emptyDir, got %+v", vols[m.Name])
		}
	default:
		pvc := vols[m.Name].PersistentVolumeClaim
		if pvc == nil || r.get("PersistentVolumeClaim", pvc.ClaimName) == nil {
			t.Errorf("state volume %+v is no rendered PVC (%v)", vols[m.Name], r.order)
		}
	}

	// The config file the args name is the ConfigMap's, and every file
	// the config names is in a mounted volume: secrets in Secrets.
	if !slices.Equal(c.Args, []string{"serve", "--config", "/etc/bootops/config/serve.yaml"}) {
		t.Errorf("args %v", c.Args)
	}
	if v := vols[mounts["/etc/bootops/config"].Name]; v.ConfigMap == nil || v.ConfigMap.Name != cfgMap.Name {
		t.Errorf("/etc/bootops/config is not the ConfigMap: %+v", v)
	}
	secretFiles := map[string]bool{"git-password-file": true, "git-ssh-key": true, "git-known-hosts": true, "webhook-secret-file": true, "ui-token-file": true, "secrets-dir": true}
	for key, val := range cfg {
		path, _ := val.(string)
		if !strings.HasPrefix(path, "/etc/bootops/") {
			continue
		}
		dir, file := filepath.Split(path)
		if key == "secrets-dir" {
			dir, file = path, ""
		}
		mnt, ok := mounts[strings.TrimSuffix(dir, "/")]
		if !ok {
			t.Errorf("%s: %s is in no mounted volume", key, path)
			continue
		}
		v := vols[mnt.Name]
		if secretFiles[key] != (v.Secret != nil) {
			t.Errorf("%s: %s is on volume %+v (a Secret: %v)", key, path, v, secretFiles[key])
		}
		if v.Secret != nil {
			if *v.Secret.DefaultMode&0o077 != 0 {
				t.Errorf("%s: mode %o is readable by group or others: the daemon refuses it", key, *v.Secret.DefaultMode)
			}
			if file != "" && !slices.ContainsFunc(v.Secret.Items, func(it corev1.KeyToPath) bool { return it.Path == file }) {
				t.Errorf("%s: %s is no item of Secret %s: %+v", key, file, v.Secret.SecretName, v.Secret.Items)
			}
			if sec, _ := r.get("Secret", v.Secret.SecretName).(*corev1.Secret); sec != nil {
				for _, it := range v.Secret.Items {
					if _, ok := sec.Data[it.Key]; !ok {
						t.Errorf("%s: key %s is not in Secret %s", key, it.Key, sec.Name)
					}
				}
			}
		}
	}
	if name == "inline-secrets" {
		for _, k := range []string{"git-password-file", "git-ssh-key", "git-known-hosts", "webhook-secret-file", "ui-token-file", "secrets-dir"} {
			if cfg[k] == nil {
				t.Errorf("serve.yaml lacks %s", k)
			}
		}
	}
	checkGolden(t, name, cfgMap.Data["serve.yaml"])
}

// checkGolden keeps the rendered settings file in testdata, where
// cmd/bootops's TestHelmChartConfig parses it with serve's own loader.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	file := filepath.Join("testdata", "serve-config", name+".yaml")
	if *update {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil || string(want) != got {
		t.Errorf("%s differs from the rendered serve.yaml (go test ./deploy/helm -update rewrites it): %v\n--- rendered:\n%s", file, err, got)
	}
}

// checkHub: three servers routed to each other through the headless
// Service, each with its own JetStream volume.
func checkHub(t *testing.T, name string, r rendered) {
	t.Helper()
	full := release + "-bootops"
	sts, _ := r.get("StatefulSet", full+"-hub").(*appsv1.StatefulSet)
	if !enabled(t, name, "hub", false) {
		if sts != nil {
			t.Errorf("hub disabled, yet rendered")
		}
		return
	}
	if sts == nil {
		t.Fatalf("no StatefulSet %s-hub in %v", full, r.order)
	}
	headless, _ := r.get("Service", sts.Spec.ServiceName).(*corev1.Service)
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("serviceName %s: want a headless Service publishing not-ready addresses, got %+v", sts.Spec.ServiceName, headless)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 || sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("volumeClaimTemplates %d, podManagementPolicy %s", len(sts.Spec.VolumeClaimTemplates), sts.Spec.PodManagementPolicy)
	}
	c := sts.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--store=/var/lib/bootops-hub/js") || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == sts.Spec.VolumeClaimTemplates[0].Name && m.MountPath == "/var/lib/bootops-hub"
	}) {
		t.Errorf("the JetStream store is not on the claim: args %v, mounts %v", c.Args, c.VolumeMounts)
	}
	if sc := c.SecurityContext; len(sc.Capabilities.Add) != 0 || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("hub securityContext: %+v", sc)
	}
	var routes string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--routes="); ok {
			routes = v
		}
	}
	replicas := *sts.Spec.Replicas
	if !slices.Contains(c.Args, fmt.Sprintf("--replicas=%d", replicas)) {
		t.Errorf("args %v lack --replicas=%d", c.Args, replicas)
	}
	switch replicas {
	case 3:
		var want []string
		for i := range 3 {
			want = append(want, fmt.Sprintf("nats://%s-%d.%s.%s.svc:6222", sts.Name, i, headless.Name, namespace))
		}
		if routes != strings.Join(want, ",") || !slices.Contains(c.Args, "--cluster-addr=:6222") {
			t.Errorf("routes %q, want %q", routes, strings.Join(want, ","))
		}
		for _, a := range []string{"--cluster-cert=/etc/bootops-hub/cluster/tls.crt", "--cluster-key=/etc/bootops-hub/cluster/tls.key", "--cluster-ca=/etc/bootops-hub/cluster/ca.crt"} {
			if !slices.Contains(c.Args, a) {
				t.Errorf("args %v lack %s", c.Args, a)
			}
		}
		if r.get("NetworkPolicy", full+"-hub") == nil {
			t.Errorf("no NetworkPolicy guarding the route port")
		}
	case 1:
		if routes != "" || slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--cluster-addr") }) {
			t.Errorf("one server, yet routes: %v", c.Args)
		}
	default:
		t.Errorf("replicas %d", replicas)
	}
	if name == "everything" {
		if r.count("ServiceMonitor") != 2 {
			t.Errorf("want 2 ServiceMonitors, got %v", r.order)
		}
		sm, _ := r.get("ServiceMonitor", full).(*monitoringv1.ServiceMonitor)
		svc, _ := r.get("Service", full).(*corev1.Service)
		if sm == nil || svc == nil || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name || sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("ServiceMonitor %+v does not scrape Service %+v's /metrics", sm, svc)
		}
		if sel, _ := metav1.LabelSelectorAsSelector(&sm.Spec.Selector); !sel.Matches(labels.Set(svc.Labels)) {
			t.Errorf("ServiceMonitor selects no Service %s", svc.Name)
		}
	}
}

// checkNoSecretsOutsideSecrets: no secret value in a ConfigMap or in a
// workload.
func checkNoSecretsOutsideSecrets(t *testing.T, r rendered) {
	t.Helper()
	scheme := newScheme(t)
	ser := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme, kjson.SerializerOptions{Yaml: true})
	for _, key := range r.order {
		if strings.HasPrefix(key, "Secret/") {
			continue
		}
		var b strings.Builder
		if err := ser.Encode(r.objs[key], &b); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{gitToken, "AAAAsecretkey", hookSecret, uiToken, "s3cr3t-bmc", viewToken} {
			if strings.Contains(b.String(), s) {
				t.Errorf("%s holds a secret value (%s)", key, s)
			}
		}
	}
}
