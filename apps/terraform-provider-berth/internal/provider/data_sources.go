package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// berth_hardware: the instance types endpoints can be provisioned on (GET /api/hardware).
type hardwareDataSource struct{ client *Client }

type hardwareDataModel struct {
	InstanceTypes []instanceTypeModel `tfsdk:"instance_types"`
}

type instanceTypeModel struct {
	ID               types.String  `tfsdk:"id"`
	DisplayName      types.String  `tfsdk:"display_name"`
	GpuMemoryGiB     types.Float64 `tfsdk:"gpu_memory_gib"`
	AllowedGpuCounts []types.Int64 `tfsdk:"allowed_gpu_counts"`
	Available        types.Bool    `tfsdk:"available"`
}

func newHardwareDataSource() datasource.DataSource { return &hardwareDataSource{} }

func (d *hardwareDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_hardware"
}

func (d *hardwareDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.client = clientFrom(req.ProviderData, resp.Diagnostics.AddError)
}

func (d *hardwareDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "The instance types dedicated endpoints can run on.",
		Attributes: map[string]schema.Attribute{
			"instance_types": schema.ListNestedAttribute{
				Computed: true,
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"id":                 schema.StringAttribute{Computed: true, Description: "What hardware.gpu_type takes."},
					"display_name":       schema.StringAttribute{Computed: true},
					"gpu_memory_gib":     schema.Float64Attribute{Computed: true},
					"allowed_gpu_counts": schema.ListAttribute{Computed: true, ElementType: types.Int64Type},
					"available":          schema.BoolAttribute{Computed: true},
				}},
			},
		},
	}
}

func (d *hardwareDataSource) Read(ctx context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	list, err := d.client.Hardware(ctx)
	if err != nil {
		resp.Diagnostics.AddError("Cannot list hardware", err.Error())
		return
	}
	state := hardwareDataModel{InstanceTypes: []instanceTypeModel{}}
	for _, t := range list {
		counts := make([]types.Int64, len(t.AllowedGpuCounts))
		for i, c := range t.AllowedGpuCounts {
			counts[i] = types.Int64Value(c)
		}
		state.InstanceTypes = append(state.InstanceTypes, instanceTypeModel{
			ID: types.StringValue(t.ID), DisplayName: types.StringValue(t.DisplayName),
			GpuMemoryGiB: types.Float64Value(t.GpuMemoryGiB), AllowedGpuCounts: counts,
			Available: types.BoolValue(t.Available),
		})
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// berth_models: the Elastic catalog's models (GET /api/models; an inference or global key).
type modelsDataSource struct{ client *Client }

type modelsDataModel struct {
	IDs []types.String `tfsdk:"ids"`
}

func newModelsDataSource() datasource.DataSource { return &modelsDataSource{} }

func (d *modelsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_models"
}

func (d *modelsDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.client = clientFrom(req.ProviderData, resp.Diagnostics.AddError)
}

func (d *modelsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "The Elastic catalog's model names (what `model` takes on /api/chat/completions). The API lists " +
			"them to inference and global keys only.",
		Attributes: map[string]schema.Attribute{
			"ids": schema.ListAttribute{Computed: true, ElementType: types.StringType},
		},
	}
}

func (d *modelsDataSource) Read(ctx context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	list, err := d.client.Models(ctx)
	if err != nil {
		resp.Diagnostics.AddError("Cannot list models", err.Error())
		return
	}
	state := modelsDataModel{IDs: []types.String{}}
	for _, m := range list {
		state.IDs = append(state.IDs, types.StringValue(m.ID))
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}
