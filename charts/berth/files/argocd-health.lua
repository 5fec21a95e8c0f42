-- Argo CD health check for berth.dev/DedicatedEndpoint (argocd-cm key
-- resource.customizations.health.berth.dev_DedicatedEndpoint). See the chart README, "Argo CD".
--   building, waking       -> Progressing (the operator is still bringing replicas up)
--   up, hibernated         -> Healthy     (hibernated = scaled to zero on purpose; the next request wakes it)
--   failed                 -> Degraded    (with the operator's reason and message)
--   not yet reconciled, or the operator has not seen the latest spec -> Progressing
-- Argo CD runs custom health scripts without Lua's string library: only concatenation below.
local hs = { status = "Progressing", message = "Waiting for the Berth operator to reconcile the endpoint" }
local status = obj.status
if status == nil or status.phase == nil then
  return hs
end

local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.message = "Waiting for the Berth operator to observe generation " .. tostring(generation)
  return hs
end

local function describe(default)
  local text = default
  if status.message ~= nil and status.message ~= "" then
    text = status.message
  end
  if status.reason ~= nil and status.reason ~= "" then
    text = status.reason .. ": " .. text
  end
  return text
end

local phase = status.phase
if phase == "up" then
  hs.status = "Healthy"
  hs.message = describe("Serving")
elseif phase == "hibernated" then
  hs.status = "Healthy"
  hs.message = describe("Scaled to zero; the next request wakes it")
elseif phase == "building" or phase == "waking" then
  hs.status = "Progressing"
  hs.message = describe("Starting")
elseif phase == "failed" then
  hs.status = "Degraded"
  hs.message = describe("Failed")
else
  hs.status = "Unknown"
  hs.message = "Unknown phase " .. tostring(phase)
end
return hs
