-- tests/test_experiment.lua -- glimpse.experiment: the common flags, --config files and
-- --quick values against explicit flags, the output folder, the configuration header,
-- run.json and metrics.json.
local lu = require "luaunit"
local glimpse = require "glimpse"
local experiment = glimpse.experiment
local util = glimpse.util

local T = {}

-- a path in a fresh temporary directory (tests/helpers removes it), not made yet
local function tmpdir(tag)
  return require("tests.helpers").tmpdir() .. "/" .. tag
end

local function parser()
  local p = experiment.parser("toy", "A toy experiment.",
                              {steps = 400, eval_every = 50, quick = {steps = 20, lr = 0.5}})
  p:option("--lr", "learning rate", "0.01"):convert(tonumber)
  p:option("--hidden", "hidden size", "16"):convert(tonumber)
  return p
end

local function parse(argv)
  return experiment.parse(parser(), argv, {raise = true})
end

function T.test_common_flags_have_defaults_and_parse()
  local a = parse({})
  lu.assertEquals(a.seed, 1)
  lu.assertEquals(a.threads, 0)   -- glimpse's own count: every core, or GLIMPSE_THREADS
  lu.assertEquals(a.steps, 400)
  lu.assertEquals(math.type(a.steps), "integer")
  lu.assertEquals(a.eval_every, 50)
  lu.assertEquals(a.log_every, 50)
  lu.assertEquals(a.time_limit, 3600)
  lu.assertEquals(a.out, "out/toy")
  lu.assertFalse(a.quick)
  a = parse({"--seed", "7", "--steps", "12", "--time-limit", "9.5", "--out", "/tmp/x",
             "--eval-every", "3", "--log-every=4", "--threads", "2"})
  lu.assertEquals({a.seed, a.steps, a.time_limit, a.out, a.eval_every, a.log_every, a.threads},
                  {7, 12, 9.5, "/tmp/x", 3, 4, 2})
end

function T.test_quick_values_apply_unless_the_flag_is_given()
  local a = parse({"--quick"})
  lu.assertEquals(a.steps, 20)
  lu.assertEquals(a.lr, 0.5)
  a = parse({"--quick", "--steps", "33"})
  lu.assertEquals(a.steps, 33)
  lu.assertEquals(a.lr, 0.5)
end

function T.test_config_file_overrides_defaults_but_not_explicit_flags()
  local d = tmpdir("config")
  util.mkdir_p(d)
  util.write_text(d .. "/c.lua", "return {lr = 0.25, hidden = 64, steps = 99, seed = 5}\n")
  local a = parse({"--config", d .. "/c.lua", "--seed", "3"})
  lu.assertEquals(a.lr, 0.25)
  lu.assertEquals(a.hidden, 64)
  lu.assertEquals(a.steps, 99)
  lu.assertEquals(a.seed, 3)
  util.write_text(d .. "/bad.lua", "return {lernrate = 1}\n")
  local ok, err = pcall(parse, {"--config", d .. "/bad.lua"})
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "unknown flag 'lernrate'")
  util.write_text(d .. "/notable.lua", "return 42\n")
  ok, err = pcall(parse, {"--config", d .. "/notable.lua"})
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "must return a table")
end

function T.test_steps_false_leaves_the_budget_to_the_script()
  local p = experiment.parser("toy", "A toy.", {steps = false, quick = {steps = 20}})
  lu.assertNil(experiment.parse(p, {}, {raise = true}).steps)
  lu.assertEquals(experiment.parse(p, {"--steps", "0"}, {raise = true}).steps, 0)
  lu.assertEquals(experiment.parse(p, {"--quick"}, {raise = true}).steps, 20)
  local ok, err = pcall(experiment.parse, p, {"--steps=-1"}, {raise = true})
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "--steps must be an integer >= 0")
end

function T.test_bad_values_of_common_flags_are_errors()
  local ok, err = pcall(parse, {"--steps", "2.5"})
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "--steps must be an integer >= 0")
  ok, err = pcall(parse, {"--eval-every", "0"})
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "--eval-every must be an integer >= 1")
  ok, err = pcall(parse, {"--bogus"})
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "bogus")
  ok, err = pcall(experiment.parser, "toy", "x", {stpes = 3})
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "unknown default 'stpes'")
end

function T.test_a_value_outside_an_options_choices_names_the_nearest()
  local function with_choices(argv)
    local p = parser()
    p:option("--mix", "how", "example"):choices({"example", "batch"})
    return experiment.parse(p, argv, {raise = true})
  end
  lu.assertEquals(with_choices({"--mix", "batch"}).mix, "batch")
  for _, argv in ipairs({{"--mix", "bach"}, {"--mix=bach"}}) do
    local ok, err = pcall(with_choices, argv)
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(err), "'--mix' must be one of 'example', 'batch', got 'bach' "
                         .. "(did you mean 'batch'?)")
  end
  local ok, err = pcall(with_choices, {"--mix", "zzzzzz"})
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "got 'zzzzzz'")
  lu.assertNotStrContains(tostring(err), "did you mean")
end

function T.test_start_seeds_makes_the_folder_and_paths()
  local d = tmpdir("start")
  local a = parse({"--out", d .. "/deep/er", "--seed", "42"})
  local before = glimpse.get_num_threads()
  local run = experiment.start(a, {name = "toy", config = {hidden = 16}, quiet = true})
  lu.assertTrue(util.is_dir(d .. "/deep/er"))
  lu.assertEquals(run:path("x.png"), d .. "/deep/er/x.png")
  local r1 = glimpse.rand(3):totable()
  glimpse.manual_seed(42)
  lu.assertEquals(glimpse.rand(3):totable(), r1)
  lu.assertEquals(glimpse.get_num_threads(), before)   -- --threads 0 leaves the count alone
  glimpse.set_num_threads(1)
  experiment.start(parse({"--out", d .. "/t2", "--threads", "2"}), {name = "toy", quiet = true})
  lu.assertEquals(glimpse.get_num_threads(), 2)
  glimpse.set_num_threads(before)
  local o = run:trainer_options({clip = 1})
  lu.assertEquals({o.seed, o.steps, o.log_every, o.clip}, {42, 400, 50, 1})
  lu.assertNil(o.eval_every)
  lu.assertEquals(run:trainer_options({evaluate = print}).eval_every, 50)
end

function T.test_run_json_records_command_config_and_machine()
  local d = tmpdir("runjson")
  local a = parse({"--out", d, "--lr", "0.125"})
  local run = experiment.start(a, {name = "toy", config = {hidden = 16}, quiet = true})
  local n = run:count_params(glimpse.nn.Linear(3, 2))
  lu.assertEquals(n, 8)
  run:write_run_json({note = "extra"})
  local j = util.read_json(d .. "/run.json")
  lu.assertEquals(j.name, "toy")
  lu.assertEquals(j.config.args.lr, 0.125)
  lu.assertEquals(j.config.model.hidden, 16)
  lu.assertEquals(j.params, 8)
  lu.assertEquals(j.note, "extra")
  lu.assertEquals(j.glimpse, glimpse.version)
  lu.assertEquals(j.blas.core, glimpse.blas_info().core)
  lu.assertEquals(j.blas.threads, glimpse.get_num_threads())
  lu.assertTrue(j.machine.cores >= 1)
  lu.assertEquals(type(j.machine.cpu), "string")
  lu.assertEquals(type(j.machine.loadavg), "string")
  lu.assertNotNil(j.started:match("^%d+%-%d+%-%d+T%d+:%d+:%d+Z$"))
end

function T.test_metrics_json_is_written_with_threads_and_params()
  local d = tmpdir("metrics")
  local run = experiment.start(parse({"--out", d}), {name = "toy", quiet = true})
  run:count_params({glimpse.zeros(2, 5), glimpse.zeros(3)})
  run:write_metrics({accuracy = 0.75, history = {{step = 1, loss = 0.5}}})
  local j = util.read_json(d .. "/metrics.json")
  lu.assertEquals(j.accuracy, 0.75)
  lu.assertEquals(j.history[1].loss, 0.5)
  lu.assertEquals(j.threads, glimpse.get_num_threads())
  lu.assertEquals(j.params, 13)
  local ok, err = pcall(run.write_metrics, run, 3)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "run:write_metrics: expected a table")
end

function T.test_header_prints_flags_and_config()
  local d = tmpdir("header")
  local lines = {}
  local real_print = print
  print = function(...) lines[#lines + 1] = table.concat({...}, "\t") end    -- luacheck: ignore
  local ok, err = pcall(experiment.start, parse({"--out", d, "--hidden", "32"}),
                        {name = "toy", config = {score = "dot"}})
  print = real_print                                                          -- luacheck: ignore
  lu.assertTrue(ok, tostring(err))
  local text = table.concat(lines, "\n")
  lu.assertStrContains(text, "toy: ")
  lu.assertStrContains(text, "hidden=32")
  lu.assertStrContains(text, "score=dot")
  lu.assertStrContains(text, "output " .. d)
end

function T.test_shared_flags_have_defaults_help_and_integer_checks()
  local p = experiment.parser("toy", "A toy.", {out = false})
  experiment.add_flags(p, {batch = 32, lr = 0.1, beam = {4, "beam width here"}, load = false})
  experiment.int_flags(p, {width = 2})
  p:option("--width", "a width", "3"):convert(tonumber)
  local a = experiment.parse(p, {}, {raise = true})
  lu.assertEquals({a.batch, a.lr, a.beam, a.width}, {32, 0.1, 4, 3})
  lu.assertNil(a.load)
  lu.assertNil(a.out)                                    -- out = false: the script names it
  lu.assertEquals(math.type(experiment.parse(p, {"--batch", "8"}, {raise = true}).batch), "integer")
  lu.assertStrContains(p:get_help(), "beam width here")
  for _, argv in ipairs({{"--batch", "0"}, {"--beam", "2.5"}, {"--width", "1"}}) do
    local ok, err = pcall(experiment.parse, p, argv, {raise = true})
    lu.assertFalse(ok, argv[1])
    lu.assertStrContains(tostring(err), argv[1] .. " must be an integer >= ")
  end
  local ok, err = pcall(experiment.add_flags, p, {hiden = 3})
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "unknown flag 'hiden'")
end

function T.test_int_list_reads_comma_separated_integers()
  local p = experiment.parser("toy", "A toy.")
  lu.assertEquals(experiment.int_list(p, "--sizes", "5, 10,50", 1), {5, 10, 50})
  lu.assertEquals(experiment.int_list(p, "--sizes", nil, 1), {})
end

function T.test_report_page_has_summary_curves_tables_pictures_and_flags()
  local d = tmpdir("report")
  local run = experiment.start(parse({"--out", d}), {name = "toy", quiet = true})
  glimpse.image.save(d .. "/map.png", glimpse.rand(3, 8, 8))
  local history = {losses = {{step = 10, loss = 2}, {step = 20, loss = 1}},
                   evals = {{step = 10, accuracy = 0.25}, {step = 20, accuracy = 0.5}}}
  local path = run:write_report{title = "toy <report>", summary = {accuracy = 0.5, task = "copy"},
                                history = history, charts = {"accuracy"}, images = {"map.png"},
                                tables = {{caption = "per length", rows = {{"length", "bits"}, {5, 0.25}}}}}
  lu.assertEquals(path, d .. "/index.html")
  local html = util.read_text(path)
  lu.assertStrContains(html, "toy &lt;report&gt;")
  lu.assertStrContains(html, "Training loss")
  lu.assertEquals(select(2, html:gsub("<svg", "")), 2)   -- the loss curve and the accuracy chart
  lu.assertStrContains(html, "per length")
  lu.assertStrContains(html, 'src="map.png"')
  lu.assertStrContains(html, "hidden")                   -- the flags table
  local ok, err = pcall(run.write_report, run, "x")
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "run:write_report: expected an options table")
end

return T
