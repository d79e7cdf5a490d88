// Command k8s-validate checks rendered Kubernetes manifests (e.g. `helm template` output)
// against the Kubernetes API types, offline, without a cluster.
//
// Usage:
//
//	k8s-validate FILE...        # multi-document YAML files
//	k8s-validate -              # read from stdin
//
// For every non-empty YAML document it prints `ok <kind>/<name>`, or for each problem
// `<file>: document N (<kind>/<name>): <error>` (N counts the non-empty documents of that file,
// from 1). Exit status: 0 all documents valid, 1 some document invalid, 2 usage or I/O error.
//
// What it checks:
//
//   - apiVersion+kind is a known type: core/v1, apps/v1, policy/v1, networking.k8s.io/v1,
//     rbac.authorization.k8s.io/v1, autoscaling/v2, batch/v1 (from k8s.io/api) and
//     monitoring.coreos.com/v1 (prometheus-operator: ServiceMonitor, PodMonitor, PrometheusRule,
//     ...) and ray.io/v1 (KubeRay: RayCluster, its head's and worker groups' pod templates checked
//     as pods'). Anything else is an error.
//   - strict decoding into the typed Go struct: unknown fields (at any depth, case-sensitive, like
//     the API server's strict field validation), duplicate keys and wrong value types are errors.
//   - semantic rules that the API server enforces and that decoding cannot see:
//   - metadata: name present, a DNS-1123 subdomain (a DNS-1035 label for a Service, as the API
//     server requires); namespace a DNS-1123 label; label keys/values and annotation keys valid;
//     no two objects of the same kind/namespace/name across all inputs.
//   - Deployment, StatefulSet, DaemonSet: spec.selector non-empty and matching
//     spec.template.metadata.labels.
//   - pod templates (also Job, CronJob): at least one container; every (init) container has a
//     unique DNS-1123 label name and an image; container port names valid (IANA_SVC_NAME, at
//     most 15 characters) and port numbers in range; probe ports, when named, name a port of
//     that container; volumeMounts name a declared volume (or a StatefulSet
//     volumeClaimTemplate); volume names unique; env var names valid; resource requests not
//     above limits.
//   - Service: selector non-empty (except type ExternalName); port numbers valid, names unique
//     and required when there is more than one port; a named targetPort is a valid port name.
//   - PodDisruptionBudget: exactly one of minAvailable / maxUnavailable.
//   - HorizontalPodAutoscaler: scaleTargetRef kind+name, 1 <= minReplicas <= maxReplicas.
//   - ConfigMap / Secret: data keys valid.
//   - PrometheusRule: group names non-empty and unique; each rule has exactly one of
//     record/alert, a non-empty expr, a valid metric name (record) and label names, and
//     `for` / `keep_firing_for` durations in Prometheus format.
//
// What it does NOT do: it is not a full API server validation. It does not apply defaults,
// admission (quotas, PodSecurity, webhooks), immutability rules, cross-object references
// (e.g. that a ServiceAccount or ConfigMap named by a pod exists), OpenAPI/CRD-schema
// constraints other than those listed above, nor parse PromQL (use `promtool check rules`).
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"
)

// newScheme registers the typed objects this tool knows.
func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme,
		appsv1.AddToScheme,
		policyv1.AddToScheme,
		networkingv1.AddToScheme,
		rbacv1.AddToScheme,
		autoscalingv2.AddToScheme,
		batchv1.AddToScheme,
		monitoringv1.AddToScheme,
		rayv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return scheme
}

// document is one non-empty YAML document of an input.
type document struct {
	file  string
	index int // 1-based among the non-empty documents of file
	kind  string
	name  string
}

func (d document) String() string {
	kind, name := d.kind, d.name
	if kind == "" {
		kind = "?"
	}
	if name == "" {
		name = "?"
	}
	return fmt.Sprintf("%s: document %d (%s/%s)", d.file, d.index, kind, name)
}

type validator struct {
	scheme *runtime.Scheme
	seen   map[string]document // kind/namespace/name -> first document
	out    io.Writer
	failed bool
}

func main() {
	args := os.Args[1:]
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(os.Stderr, "usage: k8s-validate FILE... (or - for stdin)")
		os.Exit(2)
	}
	v := &validator{scheme: newScheme(), seen: map[string]document{}, out: os.Stdout}
	for _, arg := range args {
		var (
			data []byte
			err  error
		)
		if arg == "-" {
			data, err = io.ReadAll(os.Stdin)
			arg = "<stdin>"
		} else {
			data, err = os.ReadFile(arg)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "k8s-validate: %v\n", err)
			os.Exit(2)
		}
		if err := v.validateStream(arg, data); err != nil {
			fmt.Fprintf(os.Stderr, "k8s-validate: %s: %v\n", arg, err)
			os.Exit(2)
		}
	}
	if v.failed {
		os.Exit(1)
	}
}

// validateStream splits a multi-document YAML stream and validates each non-empty document.
func (v *validator) validateStream(file string, data []byte) error {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	index := 0
	for {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		jsonData, convErr := sigsyaml.YAMLToJSONStrict(raw) // rejects duplicate keys
		if convErr == nil && isEmptyJSON(jsonData) {
			continue // only comments / whitespace
		}
		index++
		doc := document{file: file, index: index}
		var errs []error
		if convErr != nil {
			errs = []error{fmt.Errorf("invalid YAML: %w", convErr)}
		} else {
			errs = v.validateDocument(&doc, jsonData)
		}
		v.report(doc, errs)
	}
}

func isEmptyJSON(data []byte) bool {
	trimmed := bytes.TrimSpace(data)
	return len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null"))
}

func (v *validator) report(doc document, errs []error) {
	if len(errs) == 0 {
		fmt.Fprintf(v.out, "ok %s/%s\n", doc.kind, doc.name)
		return
	}
	v.failed = true
	for _, err := range errs {
		fmt.Fprintf(v.out, "%s: %v\n", doc, err)
	}
}

// validateDocument decodes one document (as JSON) strictly into its typed object and runs
// the semantic checks. It fills in doc.kind and doc.name as soon as they are known.
func (v *validator) validateDocument(doc *document, data []byte) []error {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	// Lenient first pass, only to learn which type to decode into.
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &head); err != nil {
		return []error{fmt.Errorf("not a Kubernetes object: %w", err)}
	}
	doc.kind, doc.name = head.Kind, head.Metadata.Name
	if head.APIVersion == "" || head.Kind == "" {
		return []error{errors.New("apiVersion and kind are required")}
	}
	gv, err := schema.ParseGroupVersion(head.APIVersion)
	if err != nil {
		return []error{fmt.Errorf("apiVersion %q: %w", head.APIVersion, err)}
	}
	gvk := gv.WithKind(head.Kind)
	if strings.HasSuffix(head.Kind, "List") || !v.scheme.Recognizes(gvk) {
		return []error{fmt.Errorf("unknown apiVersion/kind %s %s", head.APIVersion, head.Kind)}
	}
	obj, err := v.scheme.New(gvk)
	if err != nil {
		return []error{fmt.Errorf("unknown apiVersion/kind %s %s: %w", head.APIVersion, head.Kind, err)}
	}

	// Strict pass: case-sensitive, unknown and duplicate fields reported with their path.
	strictErrs, err := sigsjson.UnmarshalStrict(
		data, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return []error{err} // wrong type, e.g. `replicas: "two"`
	}
	if len(strictErrs) > 0 {
		return strictErrs
	}

	var c checker
	if meta, ok := obj.(metav1.Object); ok {
		c.checkMeta(head.Kind, meta)
		key := head.Kind + "/" + meta.GetNamespace() + "/" + meta.GetName()
		if first, dup := v.seen[key]; dup {
			c.addf("metadata.name", "duplicate object, first defined at %s", first)
		} else {
			v.seen[key] = *doc
		}
	}
	c.checkObject(obj)
	return c.errs
}

// checker accumulates semantic errors, each prefixed with a field path.
type checker struct {
	errs []error
}

func (c *checker) addf(path, format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

func (c *checker) addAll(path string, msgs []string) {
	for _, msg := range msgs {
		c.addf(path, "%s", msg)
	}
}

func (c *checker) checkMeta(kind string, meta metav1.Object) {
	name := meta.GetName()
	switch {
	case name == "":
		c.addf("metadata.name", "required")
	case kind == "Service":
		c.addAll("metadata.name", validation.IsDNS1035Label(name))
	default:
		c.addAll("metadata.name", validation.IsDNS1123Subdomain(name))
	}
	if ns := meta.GetNamespace(); ns != "" {
		c.addAll("metadata.namespace", validation.IsDNS1123Label(ns))
	}
	c.checkLabels("metadata.labels", meta.GetLabels())
	for key := range meta.GetAnnotations() {
		c.addAll(fmt.Sprintf("metadata.annotations[%s]", key), validation.IsQualifiedName(strings.ToLower(key)))
	}
}

func (c *checker) checkLabels(path string, set map[string]string) {
	for key, value := range set {
		c.addAll(fmt.Sprintf("%s[%s]", path, key), validation.IsQualifiedName(key))
		c.addAll(fmt.Sprintf("%s[%s]", path, key), validation.IsValidLabelValue(value))
	}
}

func (c *checker) checkObject(obj runtime.Object) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		c.checkSelector("spec", o.Spec.Selector, o.Spec.Template.Labels)
		c.checkPodSpec("spec.template.spec", &o.Spec.Template.Spec, nil)
	case *appsv1.StatefulSet:
		c.checkSelector("spec", o.Spec.Selector, o.Spec.Template.Labels)
		claims := map[string]bool{}
		for i, pvc := range o.Spec.VolumeClaimTemplates {
			if pvc.Name == "" {
				c.addf(fmt.Sprintf("spec.volumeClaimTemplates[%d].metadata.name", i), "required")
			}
			claims[pvc.Name] = true
		}
		c.checkPodSpec("spec.template.spec", &o.Spec.Template.Spec, claims)
	case *appsv1.DaemonSet:
		c.checkSelector("spec", o.Spec.Selector, o.Spec.Template.Labels)
		c.checkPodSpec("spec.template.spec", &o.Spec.Template.Spec, nil)
	case *batchv1.Job:
		c.checkPodSpec("spec.template.spec", &o.Spec.Template.Spec, nil)
	case *batchv1.CronJob:
		c.checkPodSpec("spec.jobTemplate.spec.template.spec", &o.Spec.JobTemplate.Spec.Template.Spec, nil)
	case *corev1.Pod:
		c.checkPodSpec("spec", &o.Spec, nil)
	case *rayv1.RayCluster:
		c.checkPodSpec("spec.headGroupSpec.template.spec", &o.Spec.HeadGroupSpec.Template.Spec, nil)
		for i, group := range o.Spec.WorkerGroupSpecs {
			path := fmt.Sprintf("spec.workerGroupSpecs[%d]", i)
			if group.GroupName == "" {
				c.addf(path+".groupName", "required")
			}
			c.checkPodSpec(path+".template.spec", &group.Template.Spec, nil)
		}
	case *corev1.Service:
		c.checkService(o)
	case *policyv1.PodDisruptionBudget:
		if (o.Spec.MinAvailable == nil) == (o.Spec.MaxUnavailable == nil) {
			c.addf("spec", "exactly one of minAvailable and maxUnavailable must be set")
		}
	case *autoscalingv2.HorizontalPodAutoscaler:
		if o.Spec.ScaleTargetRef.Kind == "" || o.Spec.ScaleTargetRef.Name == "" {
			c.addf("spec.scaleTargetRef", "kind and name are required")
		}
		if o.Spec.MaxReplicas < 1 {
			c.addf("spec.maxReplicas", "must be at least 1")
		}
		if m := o.Spec.MinReplicas; m != nil && (*m < 1 || *m > o.Spec.MaxReplicas) {
			c.addf("spec.minReplicas", "must be between 1 and maxReplicas")
		}
	case *corev1.ConfigMap:
		for key := range o.Data {
			c.addAll(fmt.Sprintf("data[%s]", key), validation.IsConfigMapKey(key))
		}
		for key := range o.BinaryData {
			c.addAll(fmt.Sprintf("binaryData[%s]", key), validation.IsConfigMapKey(key))
		}
	case *corev1.Secret:
		for key := range o.Data {
			c.addAll(fmt.Sprintf("data[%s]", key), validation.IsConfigMapKey(key))
		}
		for key := range o.StringData {
			c.addAll(fmt.Sprintf("stringData[%s]", key), validation.IsConfigMapKey(key))
		}
	case *monitoringv1.PrometheusRule:
		c.checkPrometheusRule(o)
	}
}

// checkSelector: a workload's selector must be non-empty and select its own pod template.
func (c *checker) checkSelector(path string, sel *metav1.LabelSelector, podLabels map[string]string) {
	if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
		c.addf(path+".selector", "required (non-empty)")
		return
	}
	c.checkLabels(path+".selector.matchLabels", sel.MatchLabels)
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		c.addf(path+".selector", "%v", err)
		return
	}
	if !selector.Matches(labels.Set(podLabels)) {
		c.addf(path+".template.metadata.labels",
			"selector %q does not match template labels %v", selector.String(), podLabels)
	}
	c.checkLabels(path+".template.metadata.labels", podLabels)
}

func (c *checker) checkPodSpec(path string, spec *corev1.PodSpec, claimTemplates map[string]bool) {
	volumes := map[string]bool{}
	for name := range claimTemplates {
		volumes[name] = true
	}
	for i, vol := range spec.Volumes {
		p := fmt.Sprintf("%s.volumes[%d].name", path, i)
		if vol.Name == "" {
			c.addf(p, "required")
			continue
		}
		c.addAll(p, validation.IsDNS1123Label(vol.Name))
		if volumes[vol.Name] && !claimTemplates[vol.Name] {
			c.addf(p, "duplicate volume %q", vol.Name)
		}
		volumes[vol.Name] = true
	}
	if len(spec.Containers) == 0 {
		c.addf(path+".containers", "at least one container is required")
	}
	names := map[string]bool{}
	groups := []struct {
		field      string
		containers []corev1.Container
	}{{"initContainers", spec.InitContainers}, {"containers", spec.Containers}}
	for _, group := range groups {
		for i := range group.containers {
			ctr := &group.containers[i]
			p := fmt.Sprintf("%s.%s[%d]", path, group.field, i)
			if ctr.Name != "" {
				if names[ctr.Name] {
					c.addf(p+".name", "duplicate container name %q", ctr.Name)
				}
				names[ctr.Name] = true
			}
			c.checkContainer(p, ctr, volumes)
		}
	}
}

func (c *checker) checkContainer(path string, ctr *corev1.Container, volumes map[string]bool) {
	if ctr.Name == "" {
		c.addf(path+".name", "required")
	} else {
		c.addAll(path+".name", validation.IsDNS1123Label(ctr.Name))
	}
	if strings.TrimSpace(ctr.Image) == "" {
		c.addf(path+".image", "required")
	}
	ports := map[string]bool{}
	for i, port := range ctr.Ports {
		p := fmt.Sprintf("%s.ports[%d]", path, i)
		c.addAll(p+".containerPort", validation.IsValidPortNum(int(port.ContainerPort)))
		if port.Name != "" {
			c.addAll(p+".name", validation.IsValidPortName(port.Name))
			if ports[port.Name] {
				c.addf(p+".name", "duplicate port name %q", port.Name)
			}
			ports[port.Name] = true
		}
	}
	probes := []struct {
		field string
		probe *corev1.Probe
	}{
		{"livenessProbe", ctr.LivenessProbe},
		{"readinessProbe", ctr.ReadinessProbe},
		{"startupProbe", ctr.StartupProbe},
	}
	for _, pr := range probes {
		if pr.probe == nil {
			continue
		}
		p := path + "." + pr.field
		h := pr.probe.ProbeHandler
		handlers := 0
		if h.Exec != nil {
			handlers++
		}
		if h.HTTPGet != nil {
			handlers++
			c.checkProbePort(p+".httpGet.port", h.HTTPGet.Port, ports)
		}
		if h.TCPSocket != nil {
			handlers++
			c.checkProbePort(p+".tcpSocket.port", h.TCPSocket.Port, ports)
		}
		if h.GRPC != nil {
			handlers++
			c.addAll(p+".grpc.port", validation.IsValidPortNum(int(h.GRPC.Port)))
		}
		if handlers != 1 {
			c.addf(p, "exactly one of exec, httpGet, tcpSocket, grpc must be set (found %d)", handlers)
		}
	}
	for i, mount := range ctr.VolumeMounts {
		p := fmt.Sprintf("%s.volumeMounts[%d]", path, i)
		if !volumes[mount.Name] {
			c.addf(p+".name", "volume %q is not declared in volumes or volumeClaimTemplates", mount.Name)
		}
		if mount.MountPath == "" {
			c.addf(p+".mountPath", "required")
		}
	}
	for i, env := range ctr.Env {
		c.addAll(fmt.Sprintf("%s.env[%d].name", path, i), validation.IsEnvVarName(env.Name))
	}
	for res, req := range ctr.Resources.Requests {
		if limit, ok := ctr.Resources.Limits[res]; ok && req.Cmp(limit) > 0 {
			c.addf(fmt.Sprintf("%s.resources.requests[%s]", path, res),
				"request %s is greater than limit %s", req.String(), limit.String())
		}
	}
}

// checkProbePort: a named probe port must be a port of the same container.
func (c *checker) checkProbePort(path string, port intstr.IntOrString, ports map[string]bool) {
	if port.Type == intstr.String {
		if msgs := validation.IsValidPortName(port.StrVal); len(msgs) > 0 {
			c.addAll(path, msgs)
		} else if !ports[port.StrVal] {
			c.addf(path, "named port %q is not a port of this container", port.StrVal)
		}
		return
	}
	c.addAll(path, validation.IsValidPortNum(int(port.IntVal)))
}

func (c *checker) checkService(svc *corev1.Service) {
	if svc.Spec.Type != corev1.ServiceTypeExternalName && len(svc.Spec.Selector) == 0 {
		c.addf("spec.selector", "required (non-empty)")
	}
	c.checkLabels("spec.selector", svc.Spec.Selector)
	names := map[string]bool{}
	for i, port := range svc.Spec.Ports {
		p := fmt.Sprintf("spec.ports[%d]", i)
		c.addAll(p+".port", validation.IsValidPortNum(int(port.Port)))
		switch {
		case port.Name == "" && len(svc.Spec.Ports) > 1:
			c.addf(p+".name", "required when the service has more than one port")
		case port.Name != "":
			c.addAll(p+".name", validation.IsDNS1123Label(port.Name))
			if names[port.Name] {
				c.addf(p+".name", "duplicate port name %q", port.Name)
			}
			names[port.Name] = true
		}
		switch {
		case port.TargetPort.Type == intstr.String:
			c.addAll(p+".targetPort", validation.IsValidPortName(port.TargetPort.StrVal))
		case port.TargetPort.IntVal != 0: // 0 means "same as port"
			c.addAll(p+".targetPort", validation.IsValidPortNum(int(port.TargetPort.IntVal)))
		}
	}
}

var (
	// Prometheus duration, as in the prometheus-operator CRD schema.
	durationRe = regexp.MustCompile(
		`^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`)
	metricNameRe = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelNameRe  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

func (c *checker) checkDuration(path string, d *monitoringv1.Duration) {
	if d != nil && (*d == "" || !durationRe.MatchString(string(*d))) {
		c.addf(path, "invalid duration %q", string(*d))
	}
}

func (c *checker) checkPrometheusRule(pr *monitoringv1.PrometheusRule) {
	groups := map[string]bool{}
	for i, group := range pr.Spec.Groups {
		p := fmt.Sprintf("spec.groups[%d]", i)
		if group.Name == "" {
			c.addf(p+".name", "required")
		} else if groups[group.Name] {
			c.addf(p+".name", "duplicate group name %q", group.Name)
		}
		groups[group.Name] = true
		c.checkDuration(p+".interval", group.Interval)
		for j, rule := range group.Rules {
			rp := fmt.Sprintf("%s.rules[%d]", p, j)
			switch {
			case (rule.Record == "") == (rule.Alert == ""):
				c.addf(rp, "exactly one of record and alert must be set")
			case rule.Record != "" && !metricNameRe.MatchString(rule.Record):
				c.addf(rp+".record", "invalid metric name %q", rule.Record)
			}
			if rule.Expr.String() == "" {
				c.addf(rp+".expr", "required")
			}
			if rule.Record != "" && (rule.For != nil || len(rule.Annotations) > 0) {
				c.addf(rp, "a recording rule cannot have for or annotations")
			}
			c.checkDuration(rp+".for", rule.For)
			c.checkDuration(rp+".keep_firing_for", (*monitoringv1.Duration)(rule.KeepFiringFor))
			for name := range rule.Labels {
				if !labelNameRe.MatchString(name) {
					c.addf(rp+".labels", "invalid label name %q", name)
				}
			}
			for name := range rule.Annotations {
				if !labelNameRe.MatchString(name) {
					c.addf(rp+".annotations", "invalid annotation name %q", name)
				}
			}
		}
	}
}
