-- tests/test_lab_options.lua -- the experiment layer's and the optimizers' options, declared
-- once as glimpse.options specs: the Trainer, every optimizer and schedule, compare's
-- settings, grid, run and run_local, progress.Bar, report.Page and reproduce.run refuse a
-- misspelt option naming the nearest real one and a value of the wrong type naming the
-- option; each spec sits on its class for `?name`; experiment.add_flags turns a spec's
-- options into a script's flags, checked by experiment.parse.
local lu = require "luaunit"
local glimpse = require "glimpse"
local options = require "glimpse.options"
local train, optim, compare = glimpse.train, glimpse.optim, glimpse.compare
local experiment, progress, report = glimpse.experiment, glimpse.progress, glimpse.report
local reproduce = require "glimpse.lab.reproduce"

local T = {}

-- the message of the error f(...) raises (f must fail)
local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  lu.assertFalse(ok, "expected an error")
  return tostring(e)
end

local function param() return glimpse.zeros(3):requires_grad() end

-- a model and generated data: the smallest Trainer
local function trainer_opts()
  local model = glimpse.nn.Linear(3, 1)
  model.loss = function(self, b) return glimpse.mse_loss(self(b.x), b.y) end
  return {model = model, optimizer = {"SGD", lr = 0.1}, steps = 2, progress = false,
          data = function() return {x = glimpse.randn(4, 3), y = glimpse.randn(4, 1)} end}
end

function T.test_trainer_refuses_a_misspelt_option_naming_the_nearest()
  local o = trainer_opts()
  o.stepz = 3
  lu.assertStrContains(err_of(train.Trainer, o),
                       "Trainer: unknown option 'stepz' (did you mean 'steps'?")
  o = trainer_opts()
  o.evaluat = function() return {} end
  lu.assertStrContains(err_of(train.Trainer, o), "did you mean 'evaluate'?")
end

function T.test_trainer_refuses_a_wrong_type_naming_the_option()
  for name, bad in pairs({steps = "3", seed = 1.5, eval_at_end = 1, progress = "no",
                          distributed = "yes", smoothing = 2, log_every = 0, data = 42}) do
    local o = trainer_opts()
    o[name] = bad
    lu.assertStrContains(err_of(train.Trainer, o), "Trainer: option '" .. name .. "'")
  end
end

function T.test_trainer_names_the_optimizer_and_schedule_a_spec_misspells()
  local o = trainer_opts()
  o.optimizer = {"Adm", lr = 0.1}
  lu.assertStrContains(err_of(train.Trainer, o),
                       "option 'optimizer': 'Adm' is not an optimizer of glimpse.optim "
                       .. "(did you mean 'Adam'?")
  o.optimizer = {"Adam", lrr = 0.1}
  lu.assertStrContains(err_of(train.Trainer, o),
                       "option 'optimizer': Adam: unknown option 'lrr' (did you mean 'lr'?")
  o = trainer_opts()
  o.schedule = {"StepLR", step_sise = 3}
  lu.assertStrContains(err_of(train.Trainer, o),
                       "option 'schedule': StepLR: unknown option 'step_sise' (did you mean "
                       .. "'step_size'?")
end

local OPTIMIZERS = {"SGD", "Adam", "AdamW", "RMSProp", "AdaDelta", "Adagrad"}

function T.test_each_optimizer_refuses_misspelt_options_and_wrong_types()
  for _, name in ipairs(OPTIMIZERS) do
    local cls = optim[name]
    lu.assertStrContains(err_of(cls, {param()}, {lr = 0.1, lrr = 1}),
                         name .. ": unknown option 'lrr' (did you mean 'lr'?")
    lu.assertStrContains(err_of(cls, {param()}, {lr = "fast"}),
                         name .. ": option 'lr' must be a number")
    lu.assertStrContains(err_of(cls, {param()}, {lr = 0.1, maximize = "no"}),
                         name .. ": option 'maximize' must be a boolean")
    lu.assertStrContains(err_of(cls, {{params = {param()}, weight_decy = 0}}, {lr = 0.1}),
                         "in a param group (did you mean 'weight_decay'?)")
  end
end

-- per schedule: good options, a misspelling of one and the name it should suggest, an
-- option with a value of the wrong type
local SCHEDULES = {
  StepLR = {{step_size = 2}, "step_sise", "step_size", {"gamma", "x"}},
  MultiStepLR = {{milestones = {2}}, "milestone", "milestones", {"milestones", 3}},
  ExponentialLR = {{gamma = 0.9}, "gama", "gamma", {"gamma", "x"}},
  CosineAnnealingLR = {{T_max = 10}, "T_mx", "T_max", {"T_max", 1.5}},
  LambdaLR = {{lr_lambda = function() return 1 end}, "lr_lamda", "lr_lambda", {"lr_lambda", 3}},
  LinearLR = {{}, "start_facor", "start_factor", {"total_iters", true}},
  LinearWarmup = {{warmup_steps = 2}, "warmup_step", "warmup_steps", {"warmup_steps", "x"}},
}

function T.test_each_schedule_refuses_misspelt_options_and_wrong_types()
  for name, case in pairs(SCHEDULES) do
    local good, typo, near, bad = case[1], case[2], case[3], case[4]
    local opt = optim.SGD({param()}, {lr = 1})
    optim[name](opt, good)                                  -- the good options work
    local o = {}
    for k, v in pairs(good) do o[k] = v end
    o[typo] = 1
    lu.assertStrContains(err_of(optim[name], opt, o), string.format(
      "%s: unknown option '%s' (did you mean '%s'?", name, typo, near))
    o = {}
    for k, v in pairs(good) do o[k] = v end
    o[bad[1]] = bad[2]
    lu.assertStrContains(err_of(optim[name], opt, o),
                         string.format("%s: option '%s' must be", name, bad[1]))
  end
end

function T.test_compare_settings_grid_and_run_refuse_misspelt_options_and_wrong_types()
  lu.assertStrContains(err_of(compare.settings, {hiden = 8}),
                       "compare.settings: unknown option 'hiden' (did you mean 'hidden'?")
  lu.assertStrContains(err_of(compare.settings, {steps = "many"}),
                       "compare.settings: option 'steps' must be")
  lu.assertStrContains(err_of(compare.settings, {test_lengths = 10}),
                       "compare.settings: option 'test_lengths' must be a table")
  lu.assertStrContains(err_of(compare.grid, {mechanism = "dot/soft"}),
                       "compare.grid: unknown option 'mechanism' (did you mean 'mechanisms'?")
  lu.assertStrContains(err_of(compare.grid, {mechanisms = "dot/soft", seeds = "two"}),
                       "compare.grid: option 'seeds' must be")
  lu.assertStrContains(err_of(compare.run, {configs = {}, out = "x", job = 2}),
                       "compare.run: unknown option 'job' (did you mean 'jobs'?")
  lu.assertStrContains(err_of(compare.run, {configs = {}, out = "x", jobs = 0}),
                       "compare.run: option 'jobs' must be a positive integer")
  lu.assertStrContains(err_of(compare.run_local, {}, "x", {job = 1}),
                       "compare.run_local: unknown option 'job' (did you mean 'jobs'?")
end

function T.test_bar_page_and_reproduce_refuse_misspelt_options()
  lu.assertStrContains(err_of(progress.Bar, {totl = 3}),
                       "progress.Bar: unknown option 'totl' (did you mean 'total'?")
  lu.assertStrContains(err_of(progress.Bar, {tty = "yes"}), "progress.Bar: option 'tty'")
  lu.assertStrContains(err_of(report.Page, {titl = "x"}),
                       "report.Page: unknown option 'titl' (did you mean 'title'?")
  lu.assertStrContains(err_of(reproduce.run, {mode = "tiny", out = "o", results = "r",
                                              doc = "d", tabels = "x"}),
                       "reproduce.run: unknown option 'tabels' (did you mean 'tables'?")
end

function T.test_every_spec_sits_on_its_class_and_lists_its_options()
  local specs = {["glimpse.train.Trainer"] = train.Trainer.options,
                 ["progress.Bar"] = progress.Bar.options, ["report.Page"] = report.Page.options,
                 ["compare.settings"] = compare.settings_options,
                 ["compare.grid"] = compare.grid_options, ["compare.run"] = compare.run_options,
                 ["compare.run_local"] = compare.run_local_options,
                 ["reproduce.run"] = reproduce.run_options}
  for _, name in ipairs(OPTIMIZERS) do specs["optim." .. name] = optim[name].options end
  for name in pairs(SCHEDULES) do specs["optim." .. name] = optim[name].options end
  for name, spec in pairs(specs) do
    lu.assertIs(getmetatable(spec), options.Spec, name)
    local lines = spec:lines()
    lu.assertTrue(#lines > 1, name)
    lu.assertStrContains(lines[1], "options:", name)
  end
  lu.assertIs(optim.RMSprop.options, optim.RMSProp.options)        -- the aliases are one class
  lu.assertStrContains(table.concat(train.Trainer.options:lines(), "\n"), "eval_every")
  lu.assertEquals(compare.DEFAULTS.steps, compare.settings_options.by_name.steps.default)
end

function T.test_add_flags_with_a_spec_gives_the_flags_and_checks_them()
  local p = experiment.parser("toy", "A toy.", {out = false})
  lu.assertIs(experiment.add_flags(p, compare.settings_options, {"batch", "train_n"},
                                   {batch = {help = "examples per step"}}), p)
  experiment.add_flags(p, train.Trainer.options, {"clip", "eval_at_end"})
  experiment.add_flags(p, optim.SGD.options, {"nesterov"})
  local help = p:get_help()
  for _, flag in ipairs({"--batch", "--train-n", "--clip", "--no-eval-at-end", "--nesterov",
                         "examples per step"}) do
    lu.assertStrContains(help, flag)
  end
  local a = experiment.parse(p, {"--train-n", "500", "--clip", "2.5", "--no-eval-at-end",
                                 "--nesterov"}, {raise = true})
  lu.assertEquals({a.batch, a.train_n, a.clip, a.eval_at_end, a.nesterov},
                  {32, 500, 2.5, false, true})
  lu.assertEquals(math.type(a.train_n), "integer")
  local s = compare.settings(compare.settings_options:from_args(a, {"batch", "train_n"}))
  lu.assertEquals({s.batch, s.train_n, s.steps}, {32, 500, compare.DEFAULTS.steps})
  lu.assertStrContains(err_of(experiment.parse, p, {"--batch", "0"}, {raise = true}),
                       "--batch: compare.settings: option 'batch' must be a positive integer")
  lu.assertStrContains(err_of(experiment.parse, p, {"--train-n", "1.5"}, {raise = true}),
                       "--train-n")
  lu.assertStrContains(err_of(experiment.add_flags, p, compare.settings_options, {"hiden"}),
                       "experiment.add_flags: compare.settings:add_flags: unknown option "
                       .. "'hiden' (did you mean 'hidden'?)")
  lu.assertStrContains(err_of(experiment.add_flags, p, compare.settings_options, "batch"),
                       "names must be a list")
end

function T.test_add_flags_with_values_still_adds_the_shared_flags()
  local p = experiment.parser("toy", "A toy.", {out = false})
  experiment.add_flags(p, {batch = 16, lr = 0.01})
  local a = experiment.parse(p, {}, {raise = true})
  lu.assertEquals({a.batch, a.lr}, {16, 0.01})
  lu.assertStrContains(err_of(experiment.add_flags, p, {hiden = 3}),
                       "unknown flag 'hiden' (did you mean 'hidden'?")
end

return T
