package provider

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
)

// waitReady follows the endpoint until it serves `generation`: `up` (or `hibernated`, scaled to
// zero once ready). `failed` is an error carrying the reason, the message and the logs' first lines.
func (r *endpointResource) waitReady(ctx context.Context, m *endpointModel, generation int64, timeout time.Duration, op string, diags *diag.Diagnostics) {
	id := m.ID.ValueString()
	deadline := time.Now().Add(timeout)
	for {
		e, err := r.client.GetEndpoint(ctx, id)
		if err != nil {
			diags.AddError(fmt.Sprintf("Cannot read endpoint %s while waiting for it", id), err.Error())
			return
		}
		m.set(e)
		current := e.ObservedGeneration != nil && *e.ObservedGeneration >= generation
		switch {
		case current && (e.Status == "up" || e.Status == "hibernated"):
			return
		case current && e.Status == "failed":
			detail := fmt.Sprintf("Endpoint %s is FAILED: %s: %s", id, deref(e.Reason), deref(e.Message))
			if logs := strings.TrimSpace(r.client.EndpointLogs(ctx, id, 4000)); logs != "" {
				detail += "\n\nLogs (GET /api/endpoints/" + id + "/logs):\n" + logs
			}
			diags.AddError(fmt.Sprintf("Endpoint %s failed (%s)", id, deref(e.Reason)), detail)
			return
		}
		if time.Now().After(deadline) {
			diags.AddError(fmt.Sprintf("Timed out waiting for endpoint %s (%s)", id, op),
				fmt.Sprintf("After %s it is %s (%s)%s; raise timeouts.%s, or see `berth endpoints logs %s`.",
					timeout, e.Status, e.Label, reasonSuffix(e), op, id))
			return
		}
		if !sleep(ctx, pollInterval) {
			diags.AddError(fmt.Sprintf("Cancelled waiting for endpoint %s", id), ctx.Err().Error())
			return
		}
	}
}

func reasonSuffix(e *Endpoint) string {
	if e.Reason == nil {
		return ""
	}
	return fmt.Sprintf(": %s: %s", *e.Reason, deref(e.Message))
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
