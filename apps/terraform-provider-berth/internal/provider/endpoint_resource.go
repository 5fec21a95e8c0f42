package provider

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/objectdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
)

// objectAs reads a nested object into its struct; the plan has no unknowns left there (defaults).
var objectAs = basetypes.ObjectAsOptions{}

// Defaults of the API (and of the DedicatedEndpoint CRD): a field left out of the configuration
// plans as the value the API would give it, so a later read shows no drift.
const (
	defaultRevision    = "main"
	defaultAuthMode    = "Private"
	defaultMinReplicas = 0
	defaultMaxReplicas = 1
	defaultIdleTimeout = 900
	defaultGpuCount    = 1
	defaultRouting     = "prefixAffinity"

	defaultCreateTimeout = 20 * time.Minute // spec §8: provisioning normally takes 2–10 minutes
	defaultUpdateTimeout = 20 * time.Minute
	defaultDeleteTimeout = 10 * time.Minute
)

// pollInterval is how often the provider reads an endpoint while it waits for it.
var pollInterval = 2 * time.Second

var routingAttrTypes = map[string]attr.Type{"strategy": types.StringType}
var hardwareAttrTypes = map[string]attr.Type{"gpu_type": types.StringType, "gpu_count": types.Int64Type}
var scalingAttrTypes = map[string]attr.Type{
	"min_replicas": types.Int64Type, "max_replicas": types.Int64Type, "idle_timeout_seconds": types.Int64Type,
}

type endpointModel struct {
	ID          types.String   `tfsdk:"id"`
	Name        types.String   `tfsdk:"name"`
	Model       types.String   `tfsdk:"model"`
	Revision    types.String   `tfsdk:"revision"`
	MaxModelLen types.Int64    `tfsdk:"max_model_len"`
	HubToken    types.String   `tfsdk:"hub_token"`
	Hardware    types.Object   `tfsdk:"hardware"`
	AuthMode    types.String   `tfsdk:"auth_mode"`
	Scaling     types.Object   `tfsdk:"scaling"`
	Routing     types.Object   `tfsdk:"routing"`
	Status      types.String   `tfsdk:"status"`
	Label       types.String   `tfsdk:"label"`
	Reason      types.String   `tfsdk:"reason"`
	Message     types.String   `tfsdk:"message"`
	BaseURL     types.String   `tfsdk:"base_url"`
	Generation  types.Int64    `tfsdk:"generation"`
	Timeouts    timeouts.Value `tfsdk:"timeouts"`
}

type hardwareModel struct {
	GpuType  types.String `tfsdk:"gpu_type"`
	GpuCount types.Int64  `tfsdk:"gpu_count"`
}

type routingModel struct {
	Strategy types.String `tfsdk:"strategy"`
}

type scalingModel struct {
	MinReplicas        types.Int64 `tfsdk:"min_replicas"`
	MaxReplicas        types.Int64 `tfsdk:"max_replicas"`
	IdleTimeoutSeconds types.Int64 `tfsdk:"idle_timeout_seconds"`
}

type endpointResource struct{ client *Client }

var (
	_ resource.ResourceWithConfigure   = &endpointResource{}
	_ resource.ResourceWithImportState = &endpointResource{}
)

func newEndpointResource() resource.Resource { return &endpointResource{} }

func (r *endpointResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_dedicated_endpoint"
}

func (r *endpointResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req.ProviderData, resp.Diagnostics.AddError)
}

func (r *endpointResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	computed := func(description string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, Description: description}
	}
	resp.Schema = schema.Schema{
		Description: "A Berth dedicated endpoint: a model served on GPUs of the account's own. Creation waits until it is " +
			"`up` (ONLINE) and fails with the reason if it ends `failed`. `model` and `hub_token` cannot change in place " +
			"(the API answers 409 endpoint_immutable): changing them replaces the endpoint. Everything else changes in place.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Optional: true, Computed: true,
				Description: "`endpt-…`: chosen by you (lowercase letters, digits and `-`, at most 63 characters), or by the API when left out. " +
					"Changing it replaces the endpoint.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown(), stringplanmodifier.RequiresReplaceIfConfigured()},
			},
			"name": schema.StringAttribute{
				Optional: true, Computed: true, PlanModifiers: keep,
				Description: "Display name (default: the id).",
			},
			"model": schema.StringAttribute{
				Required:      true,
				Description:   "Model hub id, e.g. `Qwen/Qwen2.5-0.5B-Instruct`. Changing it replaces the endpoint.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"revision": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(defaultRevision),
				Description: "Hub branch, tag or commit (default `main`).",
			},
			"max_model_len": schema.Int64Attribute{
				Optional:    true,
				Description: "Context length limit (default: the model's own).",
			},
			"hub_token": schema.StringAttribute{
				Optional: true, Sensitive: true,
				Description: "Model hub token for a gated or private model. Sent only on creation and never read back; " +
					"changing it replaces the endpoint.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"hardware": schema.SingleNestedAttribute{
				Required:    true,
				Description: "Where it runs (see the berth_hardware data source). Changes in place.",
				Attributes: map[string]schema.Attribute{
					"gpu_type": schema.StringAttribute{Required: true, Description: "Instance type id, e.g. `nvidia-l4-24gb`."},
					"gpu_count": schema.Int64Attribute{
						Optional: true, Computed: true, Default: int64default.StaticInt64(defaultGpuCount),
						Description: "GPUs per replica (default 1).",
					},
				},
			},
			"auth_mode": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(defaultAuthMode),
				Description: "`Private` (a key of the account is needed) or `Public` (no key).",
			},
			"scaling": schema.SingleNestedAttribute{
				Optional: true, Computed: true,
				Default: objectdefault.StaticValue(types.ObjectValueMust(scalingAttrTypes, map[string]attr.Value{
					"min_replicas":         types.Int64Value(defaultMinReplicas),
					"max_replicas":         types.Int64Value(defaultMaxReplicas),
					"idle_timeout_seconds": types.Int64Value(defaultIdleTimeout),
				})),
				Description: "Replicas and scale-to-zero. Changes in place.",
				Attributes: map[string]schema.Attribute{
					"min_replicas": schema.Int64Attribute{
						Optional: true, Computed: true, Default: int64default.StaticInt64(defaultMinReplicas),
						Description: "0 allows hibernation (default 0).",
					},
					"max_replicas": schema.Int64Attribute{
						Optional: true, Computed: true, Default: int64default.StaticInt64(defaultMaxReplicas),
						Description: "Default 1.",
					},
					"idle_timeout_seconds": schema.Int64Attribute{
						Optional: true, Computed: true, Default: int64default.StaticInt64(defaultIdleTimeout),
						Description: "Hibernate after this long without traffic, when min_replicas is 0 (default 900).",
					},
				},
			},
			"routing": schema.SingleNestedAttribute{
				Optional: true, Computed: true,
				Default: objectdefault.StaticValue(types.ObjectValueMust(routingAttrTypes, map[string]attr.Value{
					"strategy": types.StringValue(defaultRouting),
				})),
				Description: "How calls are spread over replicas. Changes in place.",
				Attributes: map[string]schema.Attribute{
					"strategy": schema.StringAttribute{
						Optional: true, Computed: true, Default: stringdefault.StaticString(defaultRouting),
						Description: "`prefixAffinity` (default: calls whose prompts start alike go to the same replica), " +
							"`leastLoad` or `roundRobin`.",
					},
				},
			},
			"status":  computed("`building`, `up`, `hibernated`, `waking` or `failed`."),
			"label":   computed("The dashboard label: PROVISIONING, ONLINE, SLEEPING, WAKING UP or FAILED."),
			"reason":  computed("Why the endpoint is in its status (e.g. ModelTooLarge), if anything is to be said."),
			"message": computed("The reason in words."),
			"base_url": schema.StringAttribute{
				Computed: true, PlanModifiers: keep,
				Description: "OpenAI base URL of the endpoint (`…/api/d/endpt-…`): what `base_url` of an OpenAI SDK takes.",
			},
			"generation": schema.Int64Attribute{Computed: true, Description: "Bumped by every change of the endpoint."},
			"timeouts":   timeouts.Attributes(ctx, timeouts.Opts{Create: true, Update: true, Delete: true}),
		},
	}
}

func (r *endpointResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

// body is the create (PUT/POST) body the plan describes.
func (m *endpointModel) body(ctx context.Context) (EndpointBody, diag.Diagnostics) {
	var hw hardwareModel
	var sc scalingModel
	var rt routingModel
	diags := m.Hardware.As(ctx, &hw, objectAs)
	diags.Append(m.Scaling.As(ctx, &sc, objectAs)...)
	diags.Append(m.Routing.As(ctx, &rt, objectAs)...)
	return EndpointBody{
		Name:        m.Name.ValueString(),
		Model:       m.Model.ValueString(),
		Revision:    m.Revision.ValueString(),
		MaxModelLen: m.MaxModelLen.ValueInt64Pointer(),
		HubToken:    m.HubToken.ValueString(),
		Hardware:    Hardware{GpuType: hw.GpuType.ValueString(), GpuCount: hw.GpuCount.ValueInt64()},
		AuthMode:    m.AuthMode.ValueString(),
		Scaling: Scaling{
			MinReplicas:        sc.MinReplicas.ValueInt64(),
			MaxReplicas:        sc.MaxReplicas.ValueInt64(),
			IdleTimeoutSeconds: sc.IdleTimeoutSeconds.ValueInt64(),
		},
		Routing: &Routing{Strategy: rt.Strategy.ValueString()},
	}, diags
}

// set copies what the API says into the model; hub_token and timeouts stay as configured.
func (m *endpointModel) set(e *Endpoint) {
	m.ID = types.StringValue(e.ID)
	m.Name = types.StringValue(e.Name)
	m.Model = types.StringValue(e.Model)
	m.Revision = types.StringValue(e.Revision)
	m.MaxModelLen = types.Int64PointerValue(e.MaxModelLen)
	m.Hardware = types.ObjectValueMust(hardwareAttrTypes, map[string]attr.Value{
		"gpu_type": types.StringValue(e.Hardware.GpuType), "gpu_count": types.Int64Value(e.Hardware.GpuCount),
	})
	m.AuthMode = types.StringValue(e.AuthMode)
	m.Scaling = types.ObjectValueMust(scalingAttrTypes, map[string]attr.Value{
		"min_replicas":         types.Int64Value(e.Scaling.MinReplicas),
		"max_replicas":         types.Int64Value(e.Scaling.MaxReplicas),
		"idle_timeout_seconds": types.Int64Value(e.Scaling.IdleTimeoutSeconds),
	})
	m.Routing = types.ObjectValueMust(routingAttrTypes, map[string]attr.Value{
		"strategy": types.StringValue(e.Routing.Strategy),
	})
	m.Status = types.StringValue(e.Status)
	m.Label = types.StringValue(e.Label)
	m.Reason = types.StringPointerValue(e.Reason)
	m.Message = types.StringPointerValue(e.Message)
	m.BaseURL = types.StringValue(e.BaseURL)
	m.Generation = types.Int64Value(e.Generation)
}

func (r *endpointResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan endpointModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, diags := plan.Timeouts.Create(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(diags...)
	body, diags := plan.body(ctx)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	id := plan.ID.ValueString()
	if id != "" {
		// PUT creates or updates: an endpoint that exists already is not Terraform's to adopt silently.
		if _, err := r.client.GetEndpoint(ctx, id); err == nil {
			resp.Diagnostics.AddError("Endpoint already exists",
				fmt.Sprintf("Dedicated endpoint %s exists already: import it with `terraform import <address> %s`, or choose another id.", id, id))
			return
		} else if !IsStatus(err, http.StatusNotFound) {
			resp.Diagnostics.AddError("Cannot read endpoint "+id, err.Error())
			return
		}
	}
	created, err := r.client.CreateEndpoint(ctx, id, body)
	if err != nil {
		resp.Diagnostics.AddError("Cannot create the endpoint", err.Error())
		return
	}
	// In the state from here on: a failure while waiting leaves it tainted (replaced by the next
	// apply), never forgotten while it runs on GPUs.
	plan.set(created)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
	r.waitReady(ctx, &plan, created.Generation, timeout, "create", &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *endpointResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state endpointModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	e, err := r.client.GetEndpoint(ctx, state.ID.ValueString())
	if IsStatus(err, http.StatusNotFound) {
		resp.State.RemoveResource(ctx) // terminated outside Terraform: the next plan creates it again
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read endpoint "+state.ID.ValueString(), err.Error())
		return
	}
	state.set(e)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *endpointResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state endpointModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, diags := plan.Timeouts.Update(ctx, defaultUpdateTimeout)
	resp.Diagnostics.Append(diags...)
	body, diags := plan.body(ctx)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	// Every in-place field, as planned; `model` and `hub_token` changes are replacements, never here.
	patch := map[string]any{
		"revision":    body.Revision,
		"maxModelLen": body.MaxModelLen,
		"hardware":    body.Hardware,
		"authMode":    body.AuthMode,
		"scaling":     body.Scaling,
		"routing":     body.Routing,
	}
	if body.Name != "" {
		patch["name"] = body.Name
	}
	id := state.ID.ValueString()
	// If-Match: the generation this plan was made from; a change made since by someone else is a
	// 409 endpoint_conflict (refresh and plan again), not overwritten.
	updated, err := r.client.PatchEndpoint(ctx, id, state.Generation.ValueInt64(), patch)
	if err != nil {
		resp.Diagnostics.AddError("Cannot update endpoint "+id, err.Error())
		return
	}
	plan.set(updated)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
	r.waitReady(ctx, &plan, updated.Generation, timeout, "update", &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *endpointResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state endpointModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, diags := state.Timeouts.Delete(ctx, defaultDeleteTimeout)
	resp.Diagnostics.Append(diags...)
	id := state.ID.ValueString()
	if err := r.client.DeleteEndpoint(ctx, id); err != nil && !IsStatus(err, http.StatusNotFound) {
		resp.Diagnostics.AddError("Cannot delete endpoint "+id, err.Error())
		return
	}
	// Gone once the API no longer knows it (its replicas and cached state are removed first).
	deadline := time.Now().Add(timeout)
	for {
		_, err := r.client.GetEndpoint(ctx, id)
		if IsStatus(err, http.StatusNotFound) {
			return
		}
		if time.Now().After(deadline) {
			resp.Diagnostics.AddError("Timed out deleting endpoint "+id,
				fmt.Sprintf("It was still there after %s.", timeout))
			return
		}
		if !sleep(ctx, pollInterval) {
			resp.Diagnostics.AddError("Cancelled deleting endpoint "+id, ctx.Err().Error())
			return
		}
	}
}
