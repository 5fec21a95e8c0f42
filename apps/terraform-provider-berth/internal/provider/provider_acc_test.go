package provider

// Acceptance tests: the provider served in-process (ProtoV6ProviderFactories) to the real
// `terraform` binary, against a real Berth API. They run with TF_ACC=1 and need:
//
//	BERTH_API_URL, BERTH_API_KEY     a local-mode API and a compute key of one of its accounts
//	BERTH_TEST_GLOBAL_KEY            a global key of the same account (provider-block auth, berth_api_key)
//	TF_ACC_TERRAFORM_PATH            the terraform binary (nothing is downloaded)
//
// The API's model hub is test/support/fake-hub.ts: org/small and org/small-v2 fit one L4,
// org/huge (405B parameters) does not, so it fails with ModelTooLarge.
// apps/terraform-provider-berth/test/acceptance.int.test.ts starts all of that and runs them.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

var factories = map[string]func() (tfprotov6.ProviderServer, error){
	"berth": providerserver.NewProtocol6WithError(New("acc")()),
}

func TestMain(m *testing.M) {
	// Local-mode engines are up within seconds: poll often, so the tests take seconds, not minutes.
	pollInterval = 250 * time.Millisecond
	os.Exit(m.Run())
}

// preCheck fails (never skips) a TF_ACC run that lacks what the tests need.
func preCheck(t *testing.T, vars ...string) func() {
	return func() {
		for _, v := range append([]string{"BERTH_API_URL", "BERTH_API_KEY"}, vars...) {
			if os.Getenv(v) == "" {
				t.Fatalf("%s must be set for the acceptance tests (see provider_acc_test.go)", v)
			}
		}
	}
}

// testClient reads the API directly, to check what Terraform did (never through the provider).
func testClient() *Client {
	return &Client{BaseURL: os.Getenv("BERTH_API_URL"), Key: os.Getenv("BERTH_API_KEY"), HTTP: newHTTPClient()}
}

func endpointConfig(id, model string, maxReplicas int, routing string) string {
	return fmt.Sprintf(`
data "berth_hardware" "all" {}

resource "berth_dedicated_endpoint" "test" {
  id       = %q
  model    = %q
  hardware = { gpu_type = "nvidia-l4-24gb" }
  scaling  = { min_replicas = 1, max_replicas = %d }
  routing  = { strategy = %q }
  timeouts = { create = "2m", update = "2m", delete = "2m" }
}

output "base_url" {
  value = berth_dedicated_endpoint.test.base_url
}
`, id, model, maxReplicas, routing)
}

// checkAPI asserts what GET /api/endpoints/{id} answers.
func checkAPI(id string, check func(e *Endpoint) error) resource.TestCheckFunc {
	return func(*terraform.State) error {
		e, err := testClient().GetEndpoint(context.Background(), id)
		if err != nil {
			return fmt.Errorf("GET %s: %w", id, err)
		}
		return check(e)
	}
}

func checkGone(ids ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		for _, id := range ids {
			_, err := testClient().GetEndpoint(context.Background(), id)
			if !IsStatus(err, http.StatusNotFound) {
				return fmt.Errorf("endpoint %s still exists after destroy (GET: %v)", id, err)
			}
		}
		return nil
	}
}

const addr = "berth_dedicated_endpoint.test"

// Create (waits for up), no drift, scaling and routing changed in place, model changed → replaced,
// import by id, destroy.
func TestAccDedicatedEndpoint_lifecycle(t *testing.T) {
	const id = "endpt-tf-acc"
	sameID := statecheck.CompareValue(compare.ValuesSame())
	resource.Test(t, resource.TestCase{
		PreCheck:                 preCheck(t),
		ProtoV6ProviderFactories: factories,
		CheckDestroy:             checkGone(id),
		Steps: []resource.TestStep{
			{
				Config: endpointConfig(id, "org/small", 1, "prefixAffinity"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("id"), knownvalue.StringExact(id)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact("up")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("label"), knownvalue.StringExact("ONLINE")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("generation"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("name"), knownvalue.StringExact(id)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("revision"), knownvalue.StringExact("main")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("auth_mode"), knownvalue.StringExact("Private")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("hardware"), knownvalue.ObjectExact(map[string]knownvalue.Check{
						"gpu_type": knownvalue.StringExact("nvidia-l4-24gb"), "gpu_count": knownvalue.Int64Exact(1),
					})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("scaling"), knownvalue.ObjectExact(map[string]knownvalue.Check{
						"min_replicas": knownvalue.Int64Exact(1), "max_replicas": knownvalue.Int64Exact(1),
						"idle_timeout_seconds": knownvalue.Int64Exact(900),
					})),
					statecheck.ExpectKnownOutputValue("base_url",
						knownvalue.StringRegexp(regexp.MustCompile(`^https?://[^/]+/api/d/`+id+`$`))),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckTypeSetElemNestedAttrs("data.berth_hardware.all", "instance_types.*",
						map[string]string{"id": "nvidia-l4-24gb", "available": "true"}),
					checkAPI(id, func(e *Endpoint) error {
						if e.Model != "org/small" || e.Status != "up" || e.Scaling.MaxReplicas != 1 || e.ReadyReplicas != 1 {
							return fmt.Errorf("API: model %s, status %s, maxReplicas %d, readyReplicas %d",
								e.Model, e.Status, e.Scaling.MaxReplicas, e.ReadyReplicas)
						}
						return nil
					}),
				),
			},
			// The same configuration again: nothing to do.
			{
				Config:   endpointConfig(id, "org/small", 1, "prefixAffinity"),
				PlanOnly: true,
			},
			// Scaling and routing: PATCH in place (a new generation of the same endpoint).
			{
				Config: endpointConfig(id, "org/small", 2, "leastLoad"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("generation"), knownvalue.Int64Exact(2)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact("up")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("scaling").AtMapKey("max_replicas"), knownvalue.Int64Exact(2)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("routing").AtMapKey("strategy"), knownvalue.StringExact("leastLoad")),
				},
				Check: checkAPI(id, func(e *Endpoint) error {
					if e.Generation != 2 || e.Scaling.MaxReplicas != 2 || e.Routing.Strategy != "leastLoad" || e.Model != "org/small" {
						return fmt.Errorf("API: generation %d, maxReplicas %d, routing %s, model %s",
							e.Generation, e.Scaling.MaxReplicas, e.Routing.Strategy, e.Model)
					}
					return nil
				}),
			},
			// Drift: a change made outside Terraform is planned back in place.
			{
				PreConfig: func() {
					c := testClient()
					e, err := c.GetEndpoint(context.Background(), id)
					if err == nil {
						_, err = c.PatchEndpoint(context.Background(), id, e.Generation,
							map[string]any{"scaling": map[string]int{"maxReplicas": 3}})
					}
					if err != nil {
						t.Fatalf("PATCH %s outside Terraform: %v", id, err)
					}
				},
				Config: endpointConfig(id, "org/small", 2, "leastLoad"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("scaling").AtMapKey("max_replicas"), knownvalue.Int64Exact(2)),
					},
				},
				Check: checkAPI(id, func(e *Endpoint) error {
					if e.Generation != 4 || e.Scaling.MaxReplicas != 2 {
						return fmt.Errorf("API: generation %d, maxReplicas %d", e.Generation, e.Scaling.MaxReplicas)
					}
					return nil
				}),
			},
			// The model cannot change in place (409 endpoint_immutable): destroyed, then created again.
			{
				Config: endpointConfig(id, "org/small-v2", 2, "leastLoad"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionDestroyBeforeCreate),
					},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("model"), knownvalue.StringExact("org/small-v2")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("generation"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact("up")),
				},
				Check: checkAPI(id, func(e *Endpoint) error {
					if e.Model != "org/small-v2" || e.Generation != 1 || e.Status != "up" {
						return fmt.Errorf("API: model %s, generation %d, status %s", e.Model, e.Generation, e.Status)
					}
					return nil
				}),
			},
			// Deleted outside Terraform: the refresh forgets it and the plan creates it again.
			{
				PreConfig: func() {
					c := testClient()
					if err := c.DeleteEndpoint(context.Background(), id); err != nil {
						t.Fatalf("DELETE %s outside Terraform: %v", id, err)
					}
					deadline := time.Now().Add(time.Minute)
					for _, err := c.GetEndpoint(context.Background(), id); !IsStatus(err, http.StatusNotFound); _, err = c.GetEndpoint(context.Background(), id) {
						if time.Now().After(deadline) {
							t.Fatalf("endpoint %s still there a minute after DELETE", id)
						}
						time.Sleep(pollInterval)
					}
				},
				Config: endpointConfig(id, "org/small-v2", 2, "leastLoad"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact("up")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("generation"), knownvalue.Int64Exact(1)),
				},
			},
			// Import by id: the imported state equals the managed one (hub_token is never read back).
			{
				ResourceName:            addr,
				ImportState:             true,
				ImportStateId:           id,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts", "hub_token"},
			},
		},
	})
}

// A model too large for the hardware: the apply fails with the endpoint's reason and message.
func TestAccDedicatedEndpoint_failedSurfacesReason(t *testing.T) {
	const id = "endpt-tf-huge"
	resource.Test(t, resource.TestCase{
		PreCheck:                 preCheck(t),
		ProtoV6ProviderFactories: factories,
		CheckDestroy:             checkGone(id),
		Steps: []resource.TestStep{{
			Config: fmt.Sprintf(`
resource "berth_dedicated_endpoint" "test" {
  id       = %q
  model    = "org/huge"
  hardware = { gpu_type = "nvidia-l4-24gb" }
}`, id),
			ExpectError: regexp.MustCompile(`(?s)Endpoint endpt-tf-huge failed \(ModelTooLarge\).*Endpoint endpt-tf-huge is\s+FAILED:\s+ModelTooLarge:\s+Model\s+org/huge\s+needs\s+about`),
		}, {
			// The failed endpoint stayed in the state, tainted: fixing the model replaces it.
			PreConfig: func() {
				e, err := testClient().GetEndpoint(context.Background(), id)
				if err != nil || e.Status != "failed" || deref(e.Reason) != "ModelTooLarge" {
					t.Fatalf("after the failed apply: GET %s: %+v, %v", id, e, err)
				}
			},
			Config: fmt.Sprintf(`
resource "berth_dedicated_endpoint" "test" {
  id       = %q
  model    = "org/small"
  hardware = { gpu_type = "nvidia-l4-24gb" }
}`, id),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionDestroyBeforeCreate)},
			},
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact("up")),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("label"), knownvalue.StringExact("ONLINE")),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("model"), knownvalue.StringExact("org/small")),
			},
		}},
	})
}

// timeouts.create bounds the wait: past it, the apply fails naming the status and the setting.
func TestAccDedicatedEndpoint_createTimeout(t *testing.T) {
	const id = "endpt-tf-slow"
	resource.Test(t, resource.TestCase{
		PreCheck:                 preCheck(t),
		ProtoV6ProviderFactories: factories,
		CheckDestroy:             checkGone(id),
		Steps: []resource.TestStep{{
			Config: fmt.Sprintf(`
resource "berth_dedicated_endpoint" "test" {
  id       = %q
  model    = "org/small"
  hardware = { gpu_type = "nvidia-l4-24gb" }
  timeouts = { create = "1s" }
}`, id),
			ExpectError: regexp.MustCompile(`(?s)Timed out waiting for endpoint endpt-tf-slow \(create\).*After 1s it is\s+building\s+\(PROVISIONING\).*raise\s+timeouts.create`),
		}},
	})
}

// An endpoint that exists already is not adopted silently by a create: the error says to import it.
func TestAccDedicatedEndpoint_existingNeedsImport(t *testing.T) {
	const id = "endpt-tf-taken"
	c := testClient()
	if os.Getenv(resource.EnvTfAcc) != "" {
		if _, err := c.CreateEndpoint(context.Background(), id, EndpointBody{
			Model: "org/small", Hardware: Hardware{GpuType: "nvidia-l4-24gb", GpuCount: 1},
			Scaling: Scaling{MinReplicas: 0, MaxReplicas: 1, IdleTimeoutSeconds: 900},
		}); err != nil {
			t.Fatalf("PUT %s: %v", id, err)
		}
		t.Cleanup(func() { _ = c.DeleteEndpoint(context.Background(), id) })
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 preCheck(t),
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{{
			Config: fmt.Sprintf(`
resource "berth_dedicated_endpoint" "test" {
  id       = %q
  model    = "org/small"
  hardware = { gpu_type = "nvidia-l4-24gb" }
}`, id),
			ExpectError: regexp.MustCompile(`(?s)Endpoint already exists.*Dedicated endpoint endpt-tf-taken exists\s+already:\s+import\s+it`),
		}},
	})
}

// Authentication: from the provider block (over the environment), clear errors without a key or
// with a wrong one, and the API's message when the key's scope is not enough.
func TestAccProvider_auth(t *testing.T) {
	global := os.Getenv("BERTH_TEST_GLOBAL_KEY")
	url := os.Getenv("BERTH_API_URL")
	resource.Test(t, resource.TestCase{
		PreCheck:                 preCheck(t, "BERTH_TEST_GLOBAL_KEY"),
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				// The compute key of BERTH_API_KEY may not create keys.
				Config:      `resource "berth_api_key" "ci" { name = "ci" }`,
				ExpectError: regexp.MustCompile(`This API key has scope "compute"; this route needs a key with scope\s+"global"`),
			},
			{
				PreConfig:   func() { t.Setenv("BERTH_API_KEY", "") },
				Config:      `data "berth_hardware" "all" {}`,
				ExpectError: regexp.MustCompile(`Missing Berth API key`),
			},
			{
				PreConfig:   func() { t.Setenv("BERTH_API_URL", "") },
				Config:      `provider "berth" { api_key = "svc_live_x" }` + "\n" + `data "berth_hardware" "all" {}`,
				ExpectError: regexp.MustCompile(`Missing Berth API URL`),
			},
			{
				Config: fmt.Sprintf(`provider "berth" {
  api_url = %q
  api_key = "svc_live_%s"
}
data "berth_hardware" "all" {}`, url, "0123456789abcdefghijklmnopqrstuvw"),
				ExpectError: regexp.MustCompile(`(?s)Cannot list hardware.*Invalid API key \(HTTP 401, invalid_api_key\)`),
			},
			{
				// Both from the block, the environment empty: a global key creates a key; destroy revokes it.
				Config: fmt.Sprintf(`provider "berth" {
  api_url = %q
  api_key = %q
}
resource "berth_api_key" "ci" {
  name = "ci"
}
data "berth_models" "all" {}`, url, global),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("berth_api_key.ci", tfjsonpath.New("scope"), knownvalue.StringExact("inference")),
					statecheck.ExpectKnownValue("berth_api_key.ci", tfjsonpath.New("id"),
						knownvalue.StringRegexp(regexp.MustCompile(`^key_`))),
					statecheck.ExpectKnownValue("berth_api_key.ci", tfjsonpath.New("value"),
						knownvalue.StringRegexp(regexp.MustCompile(`^svc_live_`))),
					statecheck.ExpectSensitiveValue("berth_api_key.ci", tfjsonpath.New("value")),
					statecheck.ExpectKnownValue("data.berth_models.all", tfjsonpath.New("ids"), knownvalue.NotNull()),
				},
			},
		},
	})
}

// Bad input is the API's error, at the apply that sends it, and changes nothing: an unknown
// instance type creates no endpoint; min_replicas above max_replicas leaves the endpoint as it was.
func TestAccDedicatedEndpoint_badInput(t *testing.T) {
	const id = "endpt-tf-bad"
	config := func(gpuType string, minReplicas int) string {
		return fmt.Sprintf(`
resource "berth_dedicated_endpoint" "test" {
  id       = %q
  model    = "org/small"
  hardware = { gpu_type = %q }
  scaling  = { min_replicas = %d, max_replicas = 1 }
}`, id, gpuType, minReplicas)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 preCheck(t),
		ProtoV6ProviderFactories: factories,
		CheckDestroy:             checkGone(id),
		Steps: []resource.TestStep{
			{
				Config:      config("nvidia-nope-1gb", 0),
				ExpectError: regexp.MustCompile(`(?s)Cannot create the endpoint.*Invalid request body: hardware.gpuType:.*\(HTTP\s+400,\s+validation_error\)`),
			},
			{
				PreConfig: func() {
					if _, err := testClient().GetEndpoint(context.Background(), id); !IsStatus(err, http.StatusNotFound) {
						t.Fatalf("a refused create left endpoint %s behind (GET: %v)", id, err)
					}
				},
				Config: config("nvidia-l4-24gb", 0),
				Check: checkAPI(id, func(e *Endpoint) error {
					if e.Generation != 1 || e.Scaling.MinReplicas != 0 {
						return fmt.Errorf("API: generation %d, minReplicas %d", e.Generation, e.Scaling.MinReplicas)
					}
					return nil
				}),
			},
			{
				Config:      config("nvidia-l4-24gb", 2),
				ExpectError: regexp.MustCompile(`(?s)Cannot update endpoint endpt-tf-bad.*Invalid request body:\s+scaling.minReplicas:\s+must\s+be\s+less\s+than\s+or\s+equal\s+to\s+scaling.maxReplicas\s+\(1\)`),
			},
			{
				// The refused change left the endpoint and the state as they were: nothing to apply.
				Config: config("nvidia-l4-24gb", 0),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: checkAPI(id, func(e *Endpoint) error {
					if e.Generation != 1 || e.Scaling.MinReplicas != 0 {
						return fmt.Errorf("API: generation %d, minReplicas %d", e.Generation, e.Scaling.MinReplicas)
					}
					return nil
				}),
			},
		},
	})
}
