--- glimpse -- the module a script gets from require "glimpse": the C core (tensors, autograd,
-- the engine's ops; bindings/lglimpse.c, loaded as "glimpse.core") with the Lua library's
-- modules reached as its fields on first use (glimpse.nn, glimpse.train, ...).
--
-- The library keeps one folder per layer; each layer uses only the layers above it here:
--   core      glimpse.core (C), check, options, util, autograd
--   blocks    nn/, attention/, optim/, data/, decode, metrics, planar, plot/
--   models    models/ (models/captioner/)
--   lab       lab/: train, experiment, compare, reproduce, report, progress, dist
--   cli       cli/: the REPL, `?` help, `glimpse caption`
-- datasets/ (outside the library) uses the library; the library reaches a dataset only by
-- name through glimpse.data's registry.  tests/test_layers.lua holds these rules.
local core = require "glimpse.core"

-- a nested require "glimpse" (a module loaded below) gets this table, not a second load
package.loaded["glimpse"] = core
-- "glimpse.core" stays loaded as a view of it: Lua names a function in an error message
-- ("bad argument #1 to 'glimpse.matmul'") by searching package.loaded, and two entries
-- holding the same table would make that name change from run to run
package.loaded["glimpse.core"] = setmetatable({}, {__index = core})

-- field -> module, loaded on first use
local MODULES = {
  nn = "glimpse.nn", optim = "glimpse.optim", attention = "glimpse.attention",
  data = "glimpse.data", decode = "glimpse.decode", metrics = "glimpse.metrics",
  planar = "glimpse.planar", util = "glimpse.util", check = "glimpse.check",
  options = "glimpse.options", init = "glimpse.nn.weight_init", models = "glimpse.models",
  captioner = "glimpse.models.captioner", viz = "glimpse.plot.viz", draw = "glimpse.plot.draw",
  figures = "glimpse.plot.figures", train = "glimpse.lab.train",
  experiment = "glimpse.lab.experiment", compare = "glimpse.lab.compare",
  reproduce = "glimpse.lab.reproduce", report = "glimpse.lab.report",
  progress = "glimpse.lab.progress", dist = "glimpse.lab.dist", repl = "glimpse.cli.repl",
}

-- field -> {module, name}: a function of a Lua module published at the top
local FUNCTIONS = {gradcheck = {"glimpse.autograd", "gradcheck"}}

-- the require names of earlier layouts, kept for user scripts
local ALIASES = {
  ["glimpse.optim_base"] = "glimpse.optim.base", ["glimpse.optim_sched"] = "glimpse.optim.sched",
  ["glimpse.optim_clip"] = "glimpse.optim.clip", ["glimpse.nn_init"] = "glimpse.nn.weight_init",
  ["glimpse.train"] = "glimpse.lab.train", ["glimpse.experiment"] = "glimpse.lab.experiment",
  ["glimpse.compare"] = "glimpse.lab.compare", ["glimpse.reproduce"] = "glimpse.lab.reproduce",
  ["glimpse.reproduce_tables"] = "glimpse.lab.reproduce_tables",
  ["glimpse.report"] = "glimpse.lab.report", ["glimpse.progress"] = "glimpse.lab.progress",
  ["glimpse.dist"] = "glimpse.lab.dist", ["glimpse.viz"] = "glimpse.plot.viz",
  ["glimpse.draw"] = "glimpse.plot.draw", ["glimpse.figures"] = "glimpse.plot.figures",
  ["glimpse.repl"] = "glimpse.cli.repl", ["glimpse.repl_help"] = "glimpse.cli.help",
  ["glimpse.caption_cli"] = "glimpse.cli.caption", ["glimpse.captioner"] = "glimpse.models.captioner",
  ["glimpse.models.caption_eval"] = "glimpse.models.captioner.eval",
}
for old, new in pairs(ALIASES) do
  package.preload[old] = package.preload[old] or function() return require(new) end
end

local complete = {}
for k in pairs(MODULES) do complete[k] = true end
for k in pairs(FUNCTIONS) do complete[k] = true end

setmetatable(core, {
  __index = function(t, k)
    local v
    if MODULES[k] then
      v = require(MODULES[k])
    elseif FUNCTIONS[k] then
      v = require(FUNCTIONS[k][1])[FUNCTIONS[k][2]]
    else
      return nil
    end
    rawset(t, k, v)
    return v
  end,
  __complete = complete,   -- the names __index answers, for the REPL's tab completion
})

return core
