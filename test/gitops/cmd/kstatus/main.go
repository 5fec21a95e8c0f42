// kstatus prints what kstatus (sigs.k8s.io/cli-utils/pkg/kstatus/status, the library Flux, kpt and
// the cli-utils applier use to decide whether a resource has settled) computes for one object.
//
//	kstatus [FILE]                         an object as JSON or YAML (stdin when FILE is absent or -)
//	kstatus get RESOURCE[.GROUP] NAME [-n NAMESPACE]
//	                                       the live object, through KUBECONFIG like kubectl
//
// Output, one JSON line: {"status":"InProgress","message":"…","conditions":[…]} with status one of
// InProgress, Failed, Current, Terminating, NotFound, Unknown. Exit 0 whenever a status was
// computed (whatever it is), 1 on errors, 2 on usage errors.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

type output struct {
	Status     string             `json:"status"`
	Message    string             `json:"message"`
	Conditions []status.Condition `json:"conditions"`
}

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kstatus:", err)
		var usage usageError
		if errors.As(err, &usage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string {
	return e.msg + "\nusage: kstatus [FILE|-]  |  kstatus get RESOURCE[.GROUP] NAME [-n NAMESPACE]"
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	var obj *unstructured.Unstructured
	var err error
	if len(args) > 0 && args[0] == "get" {
		obj, err = live(args[1:])
		if apierrors.IsNotFound(err) {
			return emit(stdout, output{Status: status.NotFoundStatus.String(), Message: err.Error(), Conditions: []status.Condition{}})
		}
	} else {
		obj, err = fromFile(args, stdin)
	}
	if err != nil {
		return err
	}
	res, err := status.Compute(obj)
	if err != nil {
		return fmt.Errorf("computing status: %w", err)
	}
	conditions := res.Conditions
	if conditions == nil {
		conditions = []status.Condition{}
	}
	return emit(stdout, output{Status: res.Status.String(), Message: res.Message, Conditions: conditions})
}

func emit(w io.Writer, o output) error {
	return json.NewEncoder(w).Encode(o)
}

func fromFile(args []string, stdin io.Reader) (*unstructured.Unstructured, error) {
	if len(args) > 1 {
		return nil, usageError{"at most one FILE"}
	}
	in := stdin
	if len(args) == 1 && args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = f
	}
	raw, err := io.ReadAll(in)
	if err != nil {
		return nil, err
	}
	// YAML is a superset of JSON. Decoded as the API machinery decodes objects (integers as int64,
	// which kstatus's field accessors require).
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errors.New("no object on input")
	}
	j, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("parsing the object: %w", err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(j); err != nil {
		return nil, fmt.Errorf("parsing the object: %w", err)
	}
	return obj, nil
}

func live(args []string) (*unstructured.Unstructured, error) {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	namespace := fs.String("n", "", "namespace (default: the kubeconfig context's)")
	// Accept the flag after the positional arguments too, as kubectl does.
	var positional []string
	for rest := args; len(rest) > 0; {
		if err := fs.Parse(rest); err != nil {
			return nil, usageError{err.Error()}
		}
		rest = fs.Args()
		if len(rest) > 0 {
			positional = append(positional, rest[0])
			rest = rest[1:]
		}
	}
	if len(positional) != 2 {
		return nil, usageError{"get needs RESOURCE[.GROUP] and NAME"}
	}

	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading KUBECONFIG: %w", err)
	}
	ns := *namespace
	if ns == "" {
		if ns, _, err = loader.Namespace(); err != nil {
			return nil, err
		}
	}
	cfg.Timeout = 30 * time.Second

	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	groups, err := restmapper.GetAPIGroupResources(disco)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	// Short names (crd, deploy, endpt) as kubectl expands them.
	mapper := restmapper.NewShortcutExpander(restmapper.NewDiscoveryRESTMapper(groups), disco, nil)
	gvr, err := mapper.ResourceFor(schema.ParseGroupResource(positional[0]).WithVersion(""))
	if err != nil {
		return nil, err
	}
	gvk, err := mapper.KindFor(gvr)
	if err != nil {
		return nil, err
	}
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var ri dynamic.ResourceInterface = client.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = client.Resource(mapping.Resource).Namespace(ns)
	}
	return ri.Get(context.Background(), positional[1], metav1.GetOptions{})
}
