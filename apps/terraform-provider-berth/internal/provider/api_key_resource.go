package provider

import (
	"context"
	"net/http"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

type apiKeyModel struct {
	ID        types.String `tfsdk:"id"`
	Name      types.String `tfsdk:"name"`
	Scope     types.String `tfsdk:"scope"`
	Prefix    types.String `tfsdk:"prefix"`
	Value     types.String `tfsdk:"value"`
	CreatedAt types.String `tfsdk:"created_at"`
}

type apiKeyResource struct{ client *Client }

var (
	_ resource.ResourceWithConfigure   = &apiKeyResource{}
	_ resource.ResourceWithImportState = &apiKeyResource{}
)

func newAPIKeyResource() resource.Resource { return &apiKeyResource{} }

func (r *apiKeyResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_api_key"
}

func (r *apiKeyResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req.ProviderData, resp.Diagnostics.AddError)
}

func (r *apiKeyResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	resp.Schema = schema.Schema{
		Description: "An API key of the account (the provider's key must be a global key). The API shows a key's value " +
			"once, when it is created: it is in the state (sensitive) from then on, and empty after an import. " +
			"Destroying the resource revokes the key, immediately; a key revoked outside Terraform is created again.",
		Attributes: map[string]schema.Attribute{
			"id":   schema.StringAttribute{Computed: true, PlanModifiers: keep, Description: "Key id (`key_…`)."},
			"name": schema.StringAttribute{Required: true, PlanModifiers: replace, Description: "Human-readable name."},
			"scope": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString("inference"), PlanModifiers: replace,
				Description: "`inference` (default), `compute` or `global`.",
			},
			"prefix": schema.StringAttribute{Computed: true, PlanModifiers: keep, Description: "The first characters of the value."},
			"value": schema.StringAttribute{
				Computed: true, Sensitive: true, PlanModifiers: keep,
				Description: "The key (`svc_live_…`): known only to the apply that created it.",
			},
			"created_at": schema.StringAttribute{Computed: true, PlanModifiers: keep, Description: "ISO 8601."},
		},
	}
}

func (r *apiKeyResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

func (m *apiKeyModel) set(k *Key) {
	m.ID = types.StringValue(k.ID)
	m.Name = types.StringValue(k.Name)
	m.Scope = types.StringValue(k.Scope)
	m.Prefix = types.StringValue(k.Prefix)
	m.CreatedAt = types.StringValue(k.CreatedAt)
	if k.Value != "" {
		m.Value = types.StringValue(k.Value)
	} else if m.Value.IsUnknown() {
		m.Value = types.StringNull()
	}
}

func (r *apiKeyResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan apiKeyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	k, err := r.client.CreateKey(ctx, plan.Name.ValueString(), plan.Scope.ValueString())
	if err != nil {
		resp.Diagnostics.AddError("Cannot create the API key", err.Error())
		return
	}
	plan.set(k)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *apiKeyResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state apiKeyModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	k, err := r.client.GetKey(ctx, state.ID.ValueString())
	if IsStatus(err, http.StatusNotFound) || (err == nil && k.State == "revoked") {
		resp.State.RemoveResource(ctx) // revoked outside Terraform: it cannot come back, so a new one is planned
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read API key "+state.ID.ValueString(), err.Error())
		return
	}
	state.set(k)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// Update is never called: every configurable attribute forces a new key.
func (r *apiKeyResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	resp.Diagnostics.AddError("API keys cannot change", "this is a bug in terraform-provider-berth: name and scope replace the key")
}

func (r *apiKeyResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state apiKeyModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.client.RevokeKey(ctx, state.ID.ValueString()); err != nil && !IsStatus(err, http.StatusNotFound) {
		resp.Diagnostics.AddError("Cannot revoke API key "+state.ID.ValueString(), err.Error())
	}
}
