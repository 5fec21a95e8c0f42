package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The API's objects as the provider reads them. Their JSON names are checked against the API's
// generated OpenAPI document (apps/api/generated/openapi.json) by openapi_test.go.

type Hardware struct {
	GpuType  string `json:"gpuType"`
	GpuCount int64  `json:"gpuCount"`
}

type Routing struct {
	Strategy string `json:"strategy"`
}

type Scaling struct {
	MinReplicas        int64 `json:"minReplicas"`
	MaxReplicas        int64 `json:"maxReplicas"`
	IdleTimeoutSeconds int64 `json:"idleTimeoutSeconds"`
}

// Endpoint is GET /api/endpoints/{id}.
type Endpoint struct {
	ID                 string   `json:"id"`
	Name               string   `json:"name"`
	Model              string   `json:"model"`
	Revision           string   `json:"revision"`
	MaxModelLen        *int64   `json:"maxModelLen"`
	Hardware           Hardware `json:"hardware"`
	AuthMode           string   `json:"authMode"`
	Scaling            Scaling  `json:"scaling"`
	Routing            Routing  `json:"routing"`
	Status             string   `json:"status"`
	Label              string   `json:"label"`
	Reason             *string  `json:"reason"`
	Message            *string  `json:"message"`
	ReadyReplicas      int64    `json:"readyReplicas"`
	BaseURL            string   `json:"baseUrl"`
	Generation         int64    `json:"generation"`
	ObservedGeneration *int64   `json:"observedGeneration"`
}

// EndpointBody is the body of PUT and POST /api/endpoints (PATCH takes the same fields).
type EndpointBody struct {
	Name        string   `json:"name,omitempty"`
	Model       string   `json:"model"`
	Revision    string   `json:"revision,omitempty"`
	MaxModelLen *int64   `json:"maxModelLen,omitempty"` // POST and PUT refuse null: left out is the model's own
	HubToken    string   `json:"hubToken,omitempty"`
	Hardware    Hardware `json:"hardware"`
	AuthMode    string   `json:"authMode,omitempty"`
	Scaling     Scaling  `json:"scaling"`
	Routing     *Routing `json:"routing,omitempty"`
}

// Key is an item of GET /api/keys; Value is set only in the answer to POST /api/keys.
type Key struct {
	ID        string  `json:"id"`
	Name      string  `json:"name"`
	Scope     string  `json:"scope"`
	Prefix    string  `json:"prefix"`
	State     string  `json:"state"`
	CreatedAt string  `json:"createdAt"`
	RevokedAt *string `json:"revokedAt"`
	Value     string  `json:"value,omitempty"`
}

// InstanceType is an item of GET /api/hardware.
type InstanceType struct {
	ID               string  `json:"id"`
	DisplayName      string  `json:"displayName"`
	GpuMemoryGiB     float64 `json:"gpuMemoryGiB"`
	AllowedGpuCounts []int64 `json:"allowedGpuCounts"`
	Available        bool    `json:"available"`
}

// Model is an item of GET /api/models (the Elastic catalog).
type Model struct {
	ID      string `json:"id"`
	OwnedBy string `json:"owned_by"`
}

// APIError is a non-2xx answer: the API's own message and code (both error shapes of spec §7).
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("%s (HTTP %d, %s)", e.Message, e.Status, e.Code)
	}
	return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
}

// IsStatus tells whether err is an API answer with this HTTP status.
func IsStatus(err error, status int) bool {
	var apiErr *APIError
	return errors.As(err, &apiErr) && apiErr.Status == status
}

// Client is the provider's one HTTP client of the Berth API.
type Client struct {
	BaseURL string
	Key     string
	HTTP    *http.Client
}

func (c *Client) do(ctx context.Context, method, path string, body any, headers map[string]string, out any) (http.Header, error) {
	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		reader = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, reader)
	if err != nil {
		return nil, err
	}
	req.Header.Set("authorization", "Bearer "+c.Key)
	req.Header.Set("user-agent", "terraform-provider-berth")
	if body != nil {
		req.Header.Set("content-type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the Berth API at %s: %w", c.BaseURL, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode >= 300 {
		return res.Header, parseError(res.StatusCode, data)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return res.Header, fmt.Errorf("%s %s: unexpected answer: %w", method, path, err)
		}
	}
	return res.Header, nil
}

// parseError reads `{"error": "...", "code": "..."}` and the OpenAI shape `{"error": {"message", "code"}}`.
func parseError(status int, data []byte) error {
	var raw struct {
		Error json.RawMessage `json:"error"`
		Code  string          `json:"code"`
	}
	e := &APIError{Status: status, Message: strings.TrimSpace(string(data))}
	if json.Unmarshal(data, &raw) == nil && len(raw.Error) > 0 {
		var s string
		var o struct {
			Message string `json:"message"`
			Code    string `json:"code"`
		}
		if json.Unmarshal(raw.Error, &s) == nil {
			e.Message, e.Code = s, raw.Code
		} else if json.Unmarshal(raw.Error, &o) == nil {
			e.Message, e.Code = o.Message, o.Code
		}
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e
}

func endpointPath(id string) string { return "/api/endpoints/" + url.PathEscape(id) }

func (c *Client) GetEndpoint(ctx context.Context, id string) (*Endpoint, error) {
	var e Endpoint
	_, err := c.do(ctx, http.MethodGet, endpointPath(id), nil, nil, &e)
	return &e, err
}

// CreateEndpoint provisions an endpoint: PUT when the id is chosen (idempotent), POST otherwise.
func (c *Client) CreateEndpoint(ctx context.Context, id string, body EndpointBody) (*Endpoint, error) {
	var e Endpoint
	var err error
	if id != "" {
		_, err = c.do(ctx, http.MethodPut, endpointPath(id), body, nil, &e)
	} else {
		_, err = c.do(ctx, http.MethodPost, "/api/endpoints", body, nil, &e)
	}
	return &e, err
}

// PatchEndpoint changes an endpoint in place, only if its generation is still `generation`
// (If-Match): a change made meanwhile by someone else is a 409, not overwritten.
func (c *Client) PatchEndpoint(ctx context.Context, id string, generation int64, body map[string]any) (*Endpoint, error) {
	var e Endpoint
	_, err := c.do(ctx, http.MethodPatch, endpointPath(id), body,
		map[string]string{"if-match": fmt.Sprintf(`"%d"`, generation)}, &e)
	return &e, err
}

func (c *Client) DeleteEndpoint(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, endpointPath(id), nil, nil, nil)
	return err
}

// EndpointLogs is the start of GET /api/endpoints/{id}/logs (status, events, replica output).
func (c *Client) EndpointLogs(ctx context.Context, id string, limit int) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.BaseURL, "/")+endpointPath(id)+"/logs", nil)
	if err != nil {
		return ""
	}
	req.Header.Set("authorization", "Bearer "+c.Key)
	res, err := c.HTTP.Do(req)
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(res.Body, int64(limit)))
	return string(data)
}

func (c *Client) CreateKey(ctx context.Context, name, scope string) (*Key, error) {
	var k Key
	_, err := c.do(ctx, http.MethodPost, "/api/keys", map[string]string{"name": name, "scope": scope}, nil, &k)
	return &k, err
}

// GetKey finds a key of the account by id (the API lists keys; it has no GET by id).
func (c *Client) GetKey(ctx context.Context, id string) (*Key, error) {
	var list struct {
		Data []Key `json:"data"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/api/keys", nil, nil, &list); err != nil {
		return nil, err
	}
	for i := range list.Data {
		if list.Data[i].ID == id {
			return &list.Data[i], nil
		}
	}
	return nil, &APIError{Status: http.StatusNotFound, Code: "not_found", Message: "API key not found"}
}

func (c *Client) RevokeKey(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/api/keys/"+url.PathEscape(id), nil, nil, nil)
	return err
}

func (c *Client) Hardware(ctx context.Context) ([]InstanceType, error) {
	var list struct {
		Data []InstanceType `json:"data"`
	}
	_, err := c.do(ctx, http.MethodGet, "/api/hardware", nil, nil, &list)
	return list.Data, err
}

func (c *Client) Models(ctx context.Context) ([]Model, error) {
	var list struct {
		Data []Model `json:"data"`
	}
	_, err := c.do(ctx, http.MethodGet, "/api/models", nil, nil, &list)
	return list.Data, err
}

// newHTTPClient bounds each request; waiting for an endpoint is many short requests.
func newHTTPClient() *http.Client { return &http.Client{Timeout: 60 * time.Second} }
