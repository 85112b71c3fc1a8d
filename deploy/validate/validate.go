// Package validate decodes Kubernetes manifests strictly into the official
// API types (k8s.io/api), so a misspelt or misplaced field, a duplicate key
// or a value of the wrong type is an error rather than something the API
// server would drop or refuse at apply time.
package validate

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Kinds maps "apiVersion/kind" to a new value of its type. A kind that is
// not here is refused: the chart and the examples use only these.
var Kinds = map[string]func() any{
	"v1/ServiceAccount":                  func() any { return &corev1.ServiceAccount{} },
	"v1/Secret":                          func() any { return &corev1.Secret{} },
	"v1/ConfigMap":                       func() any { return &corev1.ConfigMap{} },
	"v1/Service":                         func() any { return &corev1.Service{} },
	"v1/PersistentVolumeClaim":           func() any { return &corev1.PersistentVolumeClaim{} },
	"v1/Pod":                             func() any { return &corev1.Pod{} },
	"apps/v1/Deployment":                 func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget":      func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy": func() any { return &networkingv1.NetworkPolicy{} },
}

// Documents splits a multi-document YAML stream on its `---` lines and
// drops documents holding only comments or blank lines.
func Documents(stream []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if hasContent(cur.String()) {
			docs = append(docs, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	for _, line := range strings.SplitAfter(string(stream), "\n") {
		if strings.TrimRight(line, " \r\n") == "---" {
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return docs
}

func hasContent(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		t := strings.TrimSpace(line)
		if t != "" && !strings.HasPrefix(t, "#") {
			return true
		}
	}
	return false
}

// Decode reads one document's apiVersion and kind, then decodes the whole
// document into that kind's type twice, each refusing what the other lets
// through:
//
//   - sigs.k8s.io/yaml's UnmarshalStrict (YAML to JSON refusing duplicate
//     keys, then encoding/json with DisallowUnknownFields), which matches
//     field names without regard to case, so `readOnlyRootFileSystem`
//     would pass as `readOnlyRootFilesystem`;
//   - sigs.k8s.io/json's UnmarshalStrict, the API server's own decoder,
//     which is case-sensitive and reports unknown and duplicate fields.
func Decode(doc []byte) (any, error) {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return nil, fmt.Errorf("reading apiVersion and kind: %w", err)
	}
	key := meta.APIVersion + "/" + meta.Kind
	newObject, ok := Kinds[key]
	if !ok {
		return nil, fmt.Errorf("unknown kind %q (apiVersion %q)", meta.Kind, meta.APIVersion)
	}
	obj := newObject()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	strict, err := kjson.UnmarshalStrict(js, newObject(), kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%s: %w", key, errors.Join(strict...))
	}
	return obj, nil
}

// DecodeAll decodes every document of a stream.
func DecodeAll(stream []byte) ([]any, error) {
	var objs []any
	for i, doc := range Documents(stream) {
		obj, err := Decode(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}
