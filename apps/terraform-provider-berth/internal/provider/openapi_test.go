package provider

// The provider's JSON field names, checked against the API's generated OpenAPI document
// (apps/api/generated/openapi.json, `npm run openapi -w @berth/api`): a field the API renames or
// drops fails here, not in a user's apply. Runs without TF_ACC (no API needed).

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

type schemaNode struct {
	Type       any                    `json:"type"`
	Properties map[string]*schemaNode `json:"properties"`
	Items      *schemaNode            `json:"items"`
	AnyOf      []*schemaNode          `json:"anyOf"`
}

type openAPIDoc struct {
	Paths map[string]map[string]struct {
		RequestBody *struct {
			Content map[string]struct {
				Schema *schemaNode `json:"schema"`
			} `json:"content"`
		} `json:"requestBody"`
		Responses map[string]struct {
			Content map[string]struct {
				Schema *schemaNode `json:"schema"`
			} `json:"content"`
		} `json:"responses"`
	} `json:"paths"`
}

func loadOpenAPI(t *testing.T) openAPIDoc {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "api", "generated", "openapi.json"))
	if err != nil {
		t.Fatalf("the API's OpenAPI document: %v", err)
	}
	var doc openAPIDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return doc
}

func (d openAPIDoc) schema(t *testing.T, path, method, response string) *schemaNode {
	t.Helper()
	op, ok := d.Paths[path][method]
	if !ok {
		t.Fatalf("openapi.json has no %s %s", strings.ToUpper(method), path)
	}
	var s *schemaNode
	if response == "" {
		if op.RequestBody != nil {
			s = op.RequestBody.Content["application/json"].Schema
		}
	} else {
		s = op.Responses[response].Content["application/json"].Schema
	}
	if s == nil {
		t.Fatalf("openapi.json: %s %s has no JSON schema for %q", strings.ToUpper(method), path, response)
	}
	return s
}

// checkFields asserts that every JSON field of the Go type (nested structs too) is a property of s,
// but for the fields named in absent (not in this answer).
func checkFields(t *testing.T, where string, typ reflect.Type, s *schemaNode, absent ...string) {
	t.Helper()
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		typ = typ.Elem()
	}
	for s != nil && s.Items != nil {
		s = s.Items
	}
	if s != nil && s.Properties == nil {
		for _, alt := range s.AnyOf {
			if alt.Properties != nil {
				s = alt
			}
		}
	}
	if s == nil || s.Properties == nil {
		t.Errorf("%s: no object schema for %s", where, typ.Name())
		return
	}
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		prop, ok := s.Properties[name]
		if !ok && slices.Contains(absent, name) {
			continue
		}
		if !ok {
			t.Errorf("%s: the API has no field %q (%s.%s)", where, name, typ.Name(), f.Name)
			continue
		}
		inner := f.Type
		for inner.Kind() == reflect.Pointer || inner.Kind() == reflect.Slice {
			inner = inner.Elem()
		}
		if inner.Kind() == reflect.Struct {
			checkFields(t, where+"."+name, inner, prop)
		}
	}
}

func TestOpenAPIFieldNames(t *testing.T) {
	doc := loadOpenAPI(t)
	list := func(path string) *schemaNode { return doc.schema(t, path, "get", "200").Properties["data"] }

	checkFields(t, "GET /api/endpoints/{id}", reflect.TypeFor[Endpoint](), doc.schema(t, "/api/endpoints/{id}", "get", "200"))
	checkFields(t, "PUT /api/endpoints/{id}", reflect.TypeFor[EndpointBody](), doc.schema(t, "/api/endpoints/{id}", "put", ""))
	checkFields(t, "POST /api/endpoints", reflect.TypeFor[EndpointBody](), doc.schema(t, "/api/endpoints", "post", ""))
	checkFields(t, "GET /api/keys", reflect.TypeFor[Key](), list("/api/keys"), "value") // shown once, by POST
	checkFields(t, "POST /api/keys", reflect.TypeFor[Key](), doc.schema(t, "/api/keys", "post", "201"))
	checkFields(t, "GET /api/hardware", reflect.TypeFor[InstanceType](), list("/api/hardware"))
	checkFields(t, "GET /api/models", reflect.TypeFor[Model](), list("/api/models"))

	// The in-place fields Update sends (a map, so listed here) are PATCH's.
	patch := doc.schema(t, "/api/endpoints/{id}", "patch", "")
	for _, f := range []string{"name", "revision", "maxModelLen", "hardware", "authMode", "scaling", "routing"} {
		if _, ok := patch.Properties[f]; !ok {
			t.Errorf("PATCH /api/endpoints/{id}: the API has no field %q", f)
		}
	}
}
