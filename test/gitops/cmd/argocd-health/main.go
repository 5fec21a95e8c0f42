// argocd-health runs an Argo CD resource health script (Lua) against one object the way Argo CD's
// application controller runs a `resource.customizations.health.<group>_<Kind>` script from argocd-cm,
// and prints the health it returns.
//
//	argocd-health SCRIPT.lua [OBJECT]      OBJECT as JSON or YAML (stdin when absent or -)
//
// Output, one JSON line: {"status":"Healthy","message":"…"}. Exit 1 when the script fails to load
// or run, or returns something that is not a table (Argo CD then shows the resource's health as
// an error), 2 on usage errors.
//
// What is copied from Argo CD (util/lua/lua.go, v3): gopher-lua with SkipOpenLibs and only the
// package, base and table libraries opened (custom scripts run without useOpenLibs, so `string`,
// `math`, `io` are absent and string methods such as s:find do not work); the object converted
// value by value into a Lua table in the global `obj`; a one-second deadline; the returned table
// encoded with layeh.com/gopher-json and read as {status, message}; a status outside Argo CD's
// set becomes Unknown with Argo CD's message; a nil return means "no health". One deliberate
// difference: Argo CD's restricted `os` (time and date only) is not provided, so a script that
// needs it fails here first instead of working there.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	lua "github.com/yuin/gopher-lua"
	luajson "layeh.com/gopher-json"
	"sigs.k8s.io/yaml"
)

type health struct {
	Status  string `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
}

// Argo CD's health.HealthStatusCode values (gitops-engine pkg/health).
var validStatus = map[string]bool{
	"Unknown": true, "Progressing": true, "Suspended": true, "Healthy": true, "Degraded": true, "Missing": true,
}

func main() {
	if len(os.Args) < 2 || len(os.Args) > 3 {
		fmt.Fprintln(os.Stderr, "usage: argocd-health SCRIPT.lua [OBJECT|-]")
		os.Exit(2)
	}
	h, err := run(os.Args[1], os.Args[2:], os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "argocd-health:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(h); err != nil {
		fmt.Fprintln(os.Stderr, "argocd-health:", err)
		os.Exit(1)
	}
}

func run(scriptPath string, args []string, stdin io.Reader) (health, error) {
	script, err := os.ReadFile(scriptPath)
	if err != nil {
		return health{}, err
	}
	in := stdin
	if len(args) == 1 && args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			return health{}, err
		}
		defer f.Close()
		in = f
	}
	raw, err := io.ReadAll(in)
	if err != nil {
		return health{}, err
	}
	var obj map[string]any
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		return health{}, fmt.Errorf("parsing the object: %w", err)
	}
	if obj == nil {
		return health{}, errors.New("no object on input")
	}
	return executeHealthLua(obj, string(script))
}

func executeHealthLua(obj map[string]any, script string) (health, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return health{}, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", decodeValue(l, obj))

	fn, err := l.LoadString(script)
	if err == nil {
		l.Push(fn)
		err = l.PCall(0, lua.MultRet, nil)
	}
	if err != nil {
		return health{}, err
	}

	ret := l.Get(-1)
	switch ret.Type() {
	case lua.LTNil:
		return health{}, nil
	case lua.LTTable:
	default:
		return health{}, fmt.Errorf("expect table output from Lua script, not %s", ret.Type())
	}
	encoded, err := luajson.Encode(ret)
	if err != nil {
		return health{}, err
	}
	var h health
	if err := json.Unmarshal(encoded, &h); err != nil {
		// An empty table encodes as [] and means "no health", as in Argo CD.
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Value == "array" {
			return health{}, nil
		}
		return health{}, err
	}
	if !validStatus[h.Status] {
		return health{Status: "Unknown", Message: "Lua returned an invalid health status"}, nil
	}
	return h, nil
}

// decodeValue converts a decoded JSON value into Lua exactly as Argo CD's decodeValue does.
func decodeValue(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case []any:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(decodeValue(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for key, item := range v {
			tbl.RawSetH(lua.LString(key), decodeValue(l, item))
		}
		return tbl
	}
	return lua.LNil
}
