// Package provider is the Berth Terraform provider: the resources berth_dedicated_endpoint and
// berth_api_key, and the data sources berth_hardware and berth_models, on the Berth HTTP API.
package provider

import (
	"context"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Address is where Terraform finds the provider: `source = "berth/berth"` in required_providers.
const Address = "registry.terraform.io/berth/berth"

type berthProvider struct{ version string }

type providerModel struct {
	APIURL types.String `tfsdk:"api_url"`
	APIKey types.String `tfsdk:"api_key"`
}

// New returns the provider factory that providerserver.Serve and the acceptance tests use.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &berthProvider{version: version} }
}

func (p *berthProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "berth"
	resp.Version = p.version
}

func (p *berthProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Berth: dedicated GPU inference endpoints and API keys.",
		Attributes: map[string]schema.Attribute{
			"api_url": schema.StringAttribute{
				Optional:    true,
				Description: "Base URL of the Berth API, e.g. http://localhost:8080 (default: BERTH_API_URL).",
			},
			"api_key": schema.StringAttribute{
				Optional:  true,
				Sensitive: true,
				Description: "A compute or global key (svc_live_…; default: BERTH_API_KEY). berth_api_key needs a global key; " +
					"berth_models needs an inference or global key.",
			},
		},
	}
}

func (p *berthProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var cfg providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	url, key := os.Getenv("BERTH_API_URL"), os.Getenv("BERTH_API_KEY")
	if !cfg.APIURL.IsNull() && !cfg.APIURL.IsUnknown() {
		url = cfg.APIURL.ValueString()
	}
	if !cfg.APIKey.IsNull() && !cfg.APIKey.IsUnknown() {
		key = cfg.APIKey.ValueString()
	}
	if url == "" {
		resp.Diagnostics.AddError("Missing Berth API URL", "Set api_url in the provider block, or BERTH_API_URL.")
	}
	if key == "" {
		resp.Diagnostics.AddError("Missing Berth API key", "Set api_key in the provider block, or BERTH_API_KEY (a compute or global key).")
	}
	if resp.Diagnostics.HasError() {
		return
	}
	client := &Client{BaseURL: url, Key: key, HTTP: newHTTPClient()}
	resp.ResourceData = client
	resp.DataSourceData = client
}

func (p *berthProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{newEndpointResource, newAPIKeyResource}
}

func (p *berthProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{newHardwareDataSource, newModelsDataSource}
}

// clientFrom is the Configure step every resource and data source shares.
func clientFrom(data any, add func(summary, detail string)) *Client {
	if data == nil {
		return nil // Configure of the provider has not run yet (validation)
	}
	c, ok := data.(*Client)
	if !ok {
		add("Unexpected provider data", "this is a bug in terraform-provider-berth")
	}
	return c
}
