-- tests/test_train.lua -- glimpse.train's Trainer: the step budget, clipping, schedules,
-- evaluation cadence, early stopping, the moving average, checkpoints that resume
-- bit-identically, the history it returns, Ctrl-C (a real SIGINT to a child process) and
-- errors that name the option.  Models are a few dozen parameters, so each test takes
-- milliseconds.
local lu = require "luaunit"
local glimpse = require "glimpse"
local train = glimpse.train
local nn, optim, util = glimpse.nn, glimpse.optim, glimpse.util
local batches = require "glimpse.data.batches"

local T = {}

local EMA_TOL = 1e-12
local CLIP_TOL = 1e-5
local LR_TOL = 1e-15

-- an empty temporary directory (tests/helpers removes it after the suite)
local function tmpdir()
  return require("tests.helpers").tmpdir()
end

-- y = sum(x) regression, with dropout so the global RNG matters for resume
local Net = nn.Module:extend("TrainTestNet")
function Net:init(opts)
  self.lin = nn.Linear(3, 4)
  self.out = nn.Linear(4, 1)
  self.drop = nn.Dropout(opts and opts.dropout or 0)
  self.calls = 0
end
function Net:forward(x) return self.out(self.drop(self.lin(x):tanh())) end
function Net:loss(b)
  self.calls = self.calls + 1
  local y = self(b.x)
  return glimpse.mse_loss(y, b.y), {calls = self.calls}
end

-- a dataset of n examples with collate(indices) -> batch
local function dataset(n, seen)
  local xs = {}
  glimpse.manual_seed(99)
  local x = glimpse.randn(n, 3)
  for i = 1, n do xs[i] = x[i]:totable() end
  return {n = n, collate = function(_, idx)
    if seen then seen[#seen + 1] = table.move(idx, 1, #idx, 1, {}) end
    local rows = {}
    for k, i in ipairs(idx) do rows[k] = xs[i] end
    local xb = glimpse.tensor(rows)
    return {x = xb, y = xb:sum(2, true)}
  end}
end

local function generator(step, rng)
  local rows = {}
  for i = 1, 4 do rows[i] = {rng:normal(), rng:normal(), rng:normal()} end
  local x = glimpse.tensor(rows) + glimpse.randn(4, 3) * 0.1
  return {x = x, y = x:sum(2, true)}
end

local function params_of(m)
  local out = {}
  for k, p in pairs(m:state_dict()) do out[k] = p:totable() end
  return out
end

local function quiet(o)
  o.progress = false
  return o
end

function T.test_step_budget_is_honoured_exactly()
  glimpse.manual_seed(1)
  local m = Net()
  local h = train.Trainer(quiet{model = m, optimizer = {"SGD", lr = 0.01}, steps = 17,
                                data = dataset(10), batch_size = 4, seed = 3}):fit()
  lu.assertEquals(h.steps, 17)
  lu.assertEquals(m.calls, 17)
  lu.assertEquals(h.stopped, "steps")
  lu.assertFalse(h.interrupted)
end

function T.test_dataset_batches_follow_the_seeded_order_across_epochs()
  glimpse.manual_seed(1)
  local seen = {}
  local tr = train.Trainer(quiet{model = Net(), optimizer = {"SGD", lr = 0.01}, steps = 7,
                                 data = dataset(10, seen), batch_size = 4, seed = 5})
  tr:fit()
  local want = {}
  for e = 1, 3 do
    for _, b in ipairs(batches.order(10, {batch_size = 4, seed = 5, epoch = e})) do
      want[#want + 1] = b
    end
  end
  for k = 1, 7 do lu.assertEquals(seen[k], want[k]) end
  lu.assertEquals(tr.epoch, 3)        -- 3 batches per epoch: steps 7 = epoch 3, batch 1
  lu.assertEquals(tr.index, 1)
end

function T.test_clip_limits_the_gradient_norm_of_each_update()
  glimpse.manual_seed(1)
  local m = Net()
  local before = {}
  for i, p in ipairs(m:parameters()) do before[i] = p:clone() end
  local h = train.Trainer(quiet{model = m, optimizer = {"SGD", lr = 1}, steps = 1, clip = 1e-3,
                                loss = function(model, b) return model:loss(b) * 1000 end,
                                data = dataset(8), batch_size = 8}):fit()
  local sq = 0
  for i, p in ipairs(m:parameters()) do sq = sq + ((p - before[i]) ^ 2):sum():item() end
  lu.assertTrue(math.sqrt(sq) <= 1e-3 + CLIP_TOL, "update norm " .. math.sqrt(sq))
  lu.assertTrue(h.losses[1].grad_norm > 1, "the norm before clipping is logged")
end

function T.test_clip_value_clamps_every_gradient_entry()
  glimpse.manual_seed(1)
  local m = Net()
  local before = {}
  for i, p in ipairs(m:parameters()) do before[i] = p:clone() end
  train.Trainer(quiet{model = m, optimizer = {"SGD", lr = 1}, steps = 1, clip_value = 1e-4,
                      loss = function(model, b) return model:loss(b) * 1000 end,
                      data = dataset(8), batch_size = 8}):fit()
  for i, p in ipairs(m:parameters()) do
    lu.assertTrue((p - before[i]):abs():max():item() <= 1e-4 + CLIP_TOL)
  end
end

function T.test_schedule_is_stepped_once_per_step()
  glimpse.manual_seed(1)
  local tr = train.Trainer(quiet{model = Net(), optimizer = {"SGD", lr = 0.1}, steps = 5,
                                 schedule = {"StepLR", step_size = 1, gamma = 0.5},
                                 data = dataset(8), batch_size = 4})
  local h = tr:fit()
  lu.assertAlmostEquals(tr.optimizer.param_groups[1].lr, 0.1 * 0.5 ^ 5, LR_TOL)
  lu.assertAlmostEquals(h.losses[1].lr, 0.1 * 0.5 ^ 5, LR_TOL)
end

function T.test_cosine_schedule_spec_defaults_to_the_step_budget()
  glimpse.manual_seed(1)
  local tr = train.Trainer(quiet{model = Net(), optimizer = {"Adam", lr = 0.1}, steps = 8,
                                 schedule = {"CosineAnnealingLR"}, data = dataset(8),
                                 batch_size = 4})
  lu.assertEquals(tr.schedule.T_max, 8)
  tr:fit()
  lu.assertAlmostEquals(tr.optimizer.param_groups[1].lr, 0, LR_TOL)
end

function T.test_evaluations_come_every_eval_every_steps_and_at_the_end()
  local steps = {}
  local h = train.Trainer(quiet{model = Net(), optimizer = {"SGD", lr = 0.01}, steps = 10,
                                data = dataset(8), batch_size = 4, eval_every = 3,
                                evaluate = function(model, step)
                                  lu.assertFalse(model.training)
                                  lu.assertFalse(glimpse.is_grad_enabled())
                                  steps[#steps + 1] = step
                                  return {acc = step}
                                end}):fit()
  lu.assertEquals(steps, {3, 6, 9, 10})
  lu.assertEquals(#h.evals, 4)
  lu.assertEquals(h.evals[2].step, 6)
  lu.assertEquals(h.evals[2].acc, 6)
  lu.assertNotNil(h.evals[2].train_loss)
  steps = {}
  train.Trainer(quiet{model = Net(), optimizer = {"SGD", lr = 0.01}, steps = 10,
                      data = dataset(8), batch_size = 4, eval_every = 3, eval_at_end = false,
                      evaluate = function(_, step) steps[#steps + 1] = step return {} end}):fit()
  lu.assertEquals(steps, {3, 6, 9})
end

function T.test_target_stops_early_and_is_recorded()
  local h = train.Trainer(quiet{model = Net(), optimizer = {"SGD", lr = 0.01}, steps = 100,
                                data = dataset(8), batch_size = 4, eval_every = 1,
                                evaluate = function(_, step) return {acc = step / 10} end,
                                target = {metric = "acc", value = 0.5}}):fit()
  lu.assertEquals(h.stopped, "target")
  lu.assertEquals(h.steps, 5)
  lu.assertEquals(h.reached.step, 5)
  lu.assertEquals(h.best.acc, 0.5)
  local h2 = train.Trainer(quiet{model = Net(), optimizer = {"SGD", lr = 0.01}, steps = 20,
                                 data = dataset(8), batch_size = 4, eval_every = 2,
                                 evaluate = function(_, step) return {err = 1 / step} end,
                                 target = {metric = "err", value = 0.2, mode = "min"}}):fit()
  lu.assertEquals(h2.steps, 6)
  lu.assertEquals(h2.best.step, 6)
end

function T.test_best_tracks_the_chosen_metric_without_a_target()
  local vals = {0.3, 0.9, 0.5}
  local h = train.Trainer(quiet{model = Net(), optimizer = {"SGD", lr = 0.01}, steps = 3,
                                data = dataset(8), batch_size = 4, eval_every = 1,
                                evaluate = function(_, step) return {acc = vals[step]} end,
                                best = {metric = "acc"}}):fit()
  lu.assertEquals(h.best.step, 2)
  lu.assertEquals(h.stopped, "steps")
end

function T.test_moving_average_and_interval_means_of_loss_and_stats()
  local p = glimpse.zeros(1):requires_grad()
  local m = Net()
  local h = train.Trainer(quiet{model = m, optimizer = optim.SGD({p}, {lr = 0.1}), steps = 10,
                                log_every = 5, data = function() return {} end,
                                loss = function(_, _, step)
                                  return (p * 0):sum() + step, {reward = 2 * step}
                                end}):fit()
  local ema
  for s = 1, 10 do ema = ema and 0.95 * ema + 0.05 * s or s end
  lu.assertAlmostEquals(h.loss, ema, EMA_TOL)
  lu.assertEquals(#h.losses, 2)
  lu.assertEquals(h.losses[1].step, 5)
  lu.assertAlmostEquals(h.losses[1].loss, 3, EMA_TOL)      -- mean of 1..5
  lu.assertAlmostEquals(h.losses[2].loss, 8, EMA_TOL)      -- mean of 6..10
  lu.assertAlmostEquals(h.losses[1].reward, 6, EMA_TOL)
  lu.assertAlmostEquals(h.losses[2].smooth, ema, EMA_TOL)
end

function T.test_history_has_every_documented_field()
  local h = train.Trainer(quiet{model = Net(), optimizer = {"Adam", lr = 0.01}, steps = 4,
                                data = generator, eval_every = 2,
                                evaluate = function() return {acc = 1} end}):fit()
  lu.assertEquals(h.steps, 4)
  lu.assertTrue(h.seconds >= 0)
  lu.assertEquals(type(h.losses), "table")
  lu.assertEquals(#h.evals, 2)
  lu.assertEquals(h.stopped, "steps")
  lu.assertEquals(h.interrupted, false)
  lu.assertEquals(type(h.loss), "number")
end

function T.test_time_limit_is_a_guard_that_stops_the_run()
  local h = train.Trainer(quiet{model = Net(), optimizer = {"SGD", lr = 0.01}, steps = 1000000,
                                data = dataset(8), batch_size = 4, time_limit = 0.05}):fit()
  lu.assertEquals(h.stopped, "time")
  lu.assertTrue(h.steps < 1000000)
end

-- N steps straight against N/2, a crash, and a new Trainer resuming from the checkpoint
local function resume_case(tag, make_data, opts)
  local N = 20
  local function trainer(ckpt, on_step)
    glimpse.manual_seed(7)
    local m = Net({dropout = 0.3})
    local o = {model = m, optimizer = {"Adam", lr = 0.01}, steps = N, data = make_data(),
               seed = 11, checkpoint = ckpt, checkpoint_every = N // 2, on_step = on_step,
               schedule = {"CosineAnnealingLR"}, clip = 0.5, eval_every = 5, log_every = 3,
               evaluate = function(model) return {r = glimpse.rand(1):item()} end}
    for k, v in pairs(opts or {}) do o[k] = v end
    return train.Trainer(quiet(o)), m
  end
  local d = tmpdir(tag)
  local straight, m1 = trainer(d .. "/a.safetensors")
  local h1 = straight:fit()
  local crashing = trainer(d .. "/b.safetensors", function(_, step)
    if step == N // 2 + 3 then error("simulated crash") end
  end)
  local ok, err = pcall(crashing.fit, crashing)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "simulated crash")
  local resumed, m2 = trainer(d .. "/b.safetensors")
  local h2 = resumed:fit()
  lu.assertEquals(h2.resumed_from, N // 2)
  lu.assertEquals(h2.steps, N)
  lu.assertEquals(params_of(m2), params_of(m1))
  lu.assertEquals(#h2.evals, #h1.evals)
  for i, e in ipairs(h1.evals) do lu.assertEquals(h2.evals[i].r, e.r) end
  lu.assertEquals(h2.loss, h1.loss)
  lu.assertEquals(#h2.losses, #h1.losses)
  for i, e in ipairs(h1.losses) do lu.assertEquals(h2.losses[i].loss, e.loss) end
  lu.assertEquals({glimpse.rng_state()}, (function()
    straight:fit()                     -- already done: resumes at N, trains nothing
    return {glimpse.rng_state()}
  end)())
end

function T.test_resume_from_checkpoint_is_bit_identical_with_a_dataset()
  resume_case("ds", function() return dataset(13) end, {batch_size = 4, bucket = nil})
end

function T.test_resume_from_checkpoint_is_bit_identical_with_generated_data()
  resume_case("gen", function() return generator end)
end

function T.test_resume_continues_a_finished_run_with_a_larger_budget()
  local d = tmpdir("more")
  local ck = d .. "/c.safetensors"
  glimpse.manual_seed(3)
  local m = Net()
  local h = train.Trainer(quiet{model = m, optimizer = {"SGD", lr = 0.01}, steps = 4,
                                data = dataset(8), batch_size = 4, checkpoint = ck}):fit()
  lu.assertEquals(h.steps, 4)
  local h2 = train.Trainer(quiet{model = Net(), optimizer = {"SGD", lr = 0.01}, steps = 6,
                                 data = dataset(8), batch_size = 4, checkpoint = ck}):fit()
  lu.assertEquals(h2.resumed_from, 4)
  lu.assertEquals(h2.steps, 6)
  local fresh = train.Trainer(quiet{model = Net(), optimizer = {"SGD", lr = 0.01}, steps = 2,
                                    data = dataset(8), batch_size = 4, checkpoint = ck,
                                    resume = false}):fit()
  lu.assertEquals(fresh.resumed_from, nil)
  lu.assertEquals(fresh.steps, 2)
end

function T.test_errors_name_the_trainer_and_the_option()
  local function err_of(o)
    local ok, e = pcall(train.Trainer, o)
    lu.assertFalse(ok)
    return tostring(e)
  end
  local base = function()
    return {model = Net(), optimizer = {"SGD", lr = 0.1}, steps = 3, data = generator}
  end
  local o = base(); o.stesp = 3
  lu.assertStrContains(err_of(o), "Trainer: unknown option 'stesp'")
  o = base(); o.steps = -1
  lu.assertStrContains(err_of(o), "Trainer: option 'steps'")
  o = base(); o.steps = 2.5
  lu.assertStrContains(err_of(o), "Trainer: option 'steps'")
  o = base(); o.optimizer = {"Adamm", lr = 1}
  lu.assertStrContains(err_of(o), "Trainer: option 'optimizer'")
  o = base(); o.data = 42
  lu.assertStrContains(err_of(o), "Trainer: option 'data'")
  o = base(); o.data = dataset(4)
  lu.assertStrContains(err_of(o), "Trainer: option 'batch_size'")
  o = base(); o.eval_every = 2
  lu.assertStrContains(err_of(o), "Trainer: option 'eval_every' needs option 'evaluate'")
  o = base(); o.target = {metric = "acc", value = 1}
  lu.assertStrContains(err_of(o), "Trainer: option 'target' needs option 'evaluate'")
  o = base(); o.clip = 0
  lu.assertStrContains(err_of(o), "Trainer: option 'clip'")
  o = base(); o.schedule = {"Cosine"}
  lu.assertStrContains(err_of(o), "Trainer: option 'schedule'")
  o = base(); o.model = nn.Linear(3, 1)
  lu.assertStrContains(err_of(o), "Trainer: option 'model' has no loss(batch)")
  o = base(); o.checkpoint_every = 2
  lu.assertStrContains(err_of(o), "Trainer: option 'checkpoint_every' needs option 'checkpoint'")
  lu.assertStrContains(err_of("x"), "Trainer: expected an options table")
end

function T.test_a_bad_loss_or_stats_is_an_error_naming_the_trainer()
  local function fit_err(loss)
    local tr = train.Trainer(quiet{model = Net(), optimizer = {"SGD", lr = 0.1}, steps = 1,
                                   data = generator, loss = loss})
    local ok, e = pcall(tr.fit, tr)
    lu.assertFalse(ok)
    return tostring(e)
  end
  lu.assertStrContains(fit_err(function() return glimpse.zeros(2) end),
                       "Trainer: the loss must be a scalar tensor, got shape [2]")
  lu.assertStrContains(fit_err(function(m, b) return m:loss(b), 3 end),
                       "Trainer: model:loss returned a number as its second value")
end

-- Ctrl-C: a child glimpse process gets a real SIGINT while it trains; fit() returns the
-- history with interrupted = true and the checkpoint resumes from the step it reports
function T.test_sigint_checkpoints_and_returns_an_interrupted_history()
  local d = tmpdir("sigint")
  local script = d .. "/run.lua"
  local ck = d .. "/ck.safetensors"
  util.write_text(script, string.format([[
local glimpse = require "glimpse"
local nn = glimpse.nn
local net = nn.Sequential{nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1)}
net.loss = function(self, b) return glimpse.mse_loss(self(b.x), b.y) end
local marker = %q
local h = glimpse.train.Trainer{model = net, optimizer = {"Adam", lr = 0.01}, steps = 100000000,
  time_limit = 30, progress = false, checkpoint = %q,
  data = function() local x = glimpse.randn(16, 3) return {x = x, y = x:sum(2, true)} end,
  on_step = function(_, step) if step == 20 then io.open(marker, "w"):close() end end}:fit()
print("RESULT", h.stopped, h.interrupted, h.steps)
]], d .. "/started", ck))
  local cmd = string.format("cd %s && (%s %s > %s/out.txt 2>&1 & pid=$!; i=0; "
                            .. "while [ ! -e %s/started ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done; "
                            .. "kill -INT $pid; wait $pid; echo rc=$?)",
                            util.shell_quote(os.getenv("PWD") or "."),
                            util.shell_quote(arg and arg[-1] or "build/glimpse"), script, d, d)
  local p = io.popen(cmd)
  local rc = p:read("a")
  p:close()
  local out = util.read_text(d .. "/out.txt")
  lu.assertStrContains(rc, "rc=0", out)
  local stopped, interrupted, steps = out:match("RESULT%s+(%S+)%s+(%S+)%s+(%d+)")
  lu.assertEquals(stopped, "interrupted", out)
  lu.assertEquals(interrupted, "true")
  lu.assertStrContains(out, "interrupted at step " .. steps)
  local _, meta = glimpse.load(ck)
  lu.assertEquals(math.tointeger(util.json_decode(meta.trainer).step), tonumber(steps))
  lu.assertTrue(tonumber(steps) >= 20)
end

-- Ctrl-C during an evaluation: its random draws are undone and it runs again on resume, so
-- straight, and interrupted + resumed, give the same evaluations and parameters
function T.test_sigint_during_evaluation_resumes_identically()
  local d = tmpdir("sigint-eval")
  local script = d .. "/run.lua"
  util.write_text(script, string.format([[
local glimpse = require "glimpse"
local nn = glimpse.nn
glimpse.manual_seed(1)
local net = nn.Sequential{nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1)}
net.loss = function(self, b) return glimpse.mse_loss(self(b.x), b.y) end
local slow = os.getenv("SLOW_EVAL")
local h = glimpse.train.Trainer{model = net, optimizer = {"Adam", lr = 0.01}, steps = 40,
  progress = false, checkpoint = os.getenv("CKPT"), eval_every = 10,
  data = function() local x = glimpse.randn(16, 3) return {x = x, y = x:sum(2, true)} end,
  evaluate = function(m, step)
    local r = glimpse.rand(1):item()
    if step == 20 and slow then
      io.open(%q, "w"):close()
      local t = os.clock()
      while os.clock() - t < 20 do end
    end
    return {r = r}
  end}:fit()
print("RESULT", h.stopped, h.steps)
for _, e in ipairs(h.evals) do print(e.step, string.format("%%.17g", e.r)) end
print(string.format("%%.17g", net:parameters()[1]:sum():item()))
]], d .. "/started"))
  local exe = util.shell_quote(arg and arg[-1] or "build/glimpse")
  local function run(env)
    local p = io.popen(string.format("%s %s %s 2>&1", env, exe, script))
    local out = p:read("a")
    p:close()
    return out
  end
  local straight = run("CKPT=" .. d .. "/a.safetensors")
  lu.assertStrContains(straight, "RESULT\tsteps\t40")
  local p = io.popen(string.format("(SLOW_EVAL=1 CKPT=%s/b.safetensors %s %s > %s/int.txt 2>&1 & "
                                   .. "pid=$!; i=0; while [ ! -e %s/started ] && [ $i -lt 300 ]; "
                                   .. "do sleep 0.05; i=$((i+1)); done; kill -INT $pid; wait $pid)",
                                   d, exe, script, d, d))
  p:read("a")
  p:close()
  local out = util.read_text(d .. "/int.txt")
  lu.assertStrContains(out, "RESULT\tinterrupted\t20", out)
  local resumed = run("CKPT=" .. d .. "/b.safetensors")
  lu.assertEquals(resumed, straight)
end

return T
