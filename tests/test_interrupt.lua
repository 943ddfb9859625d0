-- tests/test_interrupt.lua -- the Trainer's Ctrl-C rule (bindings/glimpse/lab/train/interrupt.lua):
-- a run interrupted by SIGINT at 20 random moments and resumed from its checkpoint each time
-- ends with the parameters of a straight run, bit for bit, with the same history, in one
-- process and on 2 MPI ranks (there the signal goes to one rank, to every rank, or to
-- mpirun, which answers Ctrl-C with SIGTERM to every rank and SIGKILL a second later).
-- The run is tests/interrupt/run.lua, an MLP with batch norm and dropout; the signal comes a
-- random delay after the model is made (in the resume or the first steps) or after a random
-- step, so it lands in a step, an evaluation, a checkpoint write or the start.  About 40 s
-- on a busy 2-core machine.  GLIMPSE_TEST_SEED=n repeats a sequence of delays; TRACE=1
-- prints where each signal landed.
local lu = require "luaunit"
local glimpse = require "glimpse"
local H = require "tests.helpers"

local T = {}

local EXE = arg and arg[-1] or "build/glimpse"
local STEPS = 1000
local INTERRUPTS = 20
local TIMEOUT = 60               -- seconds per run: a hang fails the test instead of the suite
local MARGIN = 300               -- steps after the last signal's step: room for its delay
local SEED = tonumber(os.getenv("GLIMPSE_TEST_SEED") or "") or os.time()

local function have_mpirun()
  return os.execute("command -v mpirun > /dev/null 2>&1") == true
end

-- the run's command line under `timeout`; Open MPI keeps allocations to the end (see
-- tests/test_dist.lua): the ranks run without leak detection
local function command(d, distributed, go)
  local run = H.sh_quote(EXE) .. " tests/interrupt/run.lua " .. H.sh_quote(d) .. " " .. STEPS
              .. (go and (" --go " .. go[1] .. " " .. go[2]) or "")
  if not distributed then return "timeout " .. TIMEOUT .. " " .. run end
  local asan = (os.getenv("ASAN_OPTIONS") or "") .. ":detect_leaks=0"
  return "ASAN_OPTIONS=" .. H.sh_quote(asan) .. " timeout " .. TIMEOUT
         .. " mpirun -np 2 --allow-run-as-root --oversubscribe " .. run .. " --distributed"
end

local function show(counts)
  local parts = {}
  for k, v in pairs(counts) do parts[#parts + 1] = k .. ": " .. v end
  table.sort(parts)
  return table.concat(parts, ", ")
end

-- one run in the background; with `when` = {marker, delay, {step, ms}}: `signal` (a shell
-- line that may use $pid, $pid0, $pid1) `delay` seconds after the run made the file `marker`
-- ("ready": the model is made, before the resume; "go": after step `step`, from which on
-- each step takes `ms` milliseconds more).  Returns its output and exit status.
local function run(d, distributed, when, signal)
  for _, f in ipairs({"ready", "go", "pid.0", "pid.1", "out", "rc"}) do os.remove(d .. "/" .. f) end
  local wait_for = "[ -e $d/" .. (when and when[1] or "ready") .. " ]"
  if distributed then wait_for = wait_for .. " && [ -e $d/pid.0 ] && [ -e $d/pid.1 ]" end
  -- bash builtins only between the marker and the signal (read -t on a fifo sleeps)
  H.write_file(d .. "/signal.sh", table.concat({
    "d=" .. H.sh_quote(d) .. "; [ -p $d/fifo ] || mkfifo $d/fifo;",
    command(d, distributed, when and when[3]) .. " > $d/out 2>&1 & pid=$!;",
    when and table.concat({
      "exec 3<> $d/fifo; i=0;",
      "until " .. wait_for .. " || [ $i -ge 10000 ]; do read -t 0.001 -u 3; i=$((i+1)); done;",
      string.format("read -t %.4f -u 3;", when[2]),
      "{ read pid0 < $d/pid.0; read pid1 < $d/pid.1; } 2>/dev/null;",
      signal .. " 2>/dev/null;"}) or "",
    "wait $pid; echo $? > $d/rc"}, " "))
  os.execute("bash " .. H.sh_quote(d .. "/signal.sh"))
  return H.read_file(d .. "/out") or "", tonumber(H.read_file(d .. "/rc"))
end

local function result(out)
  local stopped, interrupted, steps, losses, evals, seconds =
    out:match("RESULT (%S+) (%S+) (%d+) (%d+) (%d+) (%S+)")
  return stopped and {stopped = stopped, interrupted = interrupted == "true",
                      steps = tonumber(steps), losses = tonumber(losses), evals = tonumber(evals),
                      seconds = tonumber(seconds)}
end

local function assert_same_bits(a_path, b_path, what)
  local a, b = glimpse.load(a_path), glimpse.load(b_path)
  local n = 0
  for name, x in pairs(a) do
    n = n + 1
    lu.assertNotNil(b[name], what .. ": no " .. name)
    lu.assertEquals(b[name]:totable(), x:totable(), what .. ": " .. name .. " differs")
  end
  for name in pairs(b) do lu.assertNotNil(a[name], what .. ": extra " .. name) end
  lu.assertTrue(n >= 10, what .. ": the parameters and the batch norms' statistics")
end

-- the straight run, then the same run interrupted INTERRUPTS times at random moments and
-- resumed each time; `signals` are the shell lines that deliver the interrupt, in turn
local function interrupted_equals_straight(distributed, signals)
  local where = distributed and "2 ranks" or "one process"
  local a, b = H.tmpdir(), H.tmpdir()
  local out, rc = run(a, distributed)
  lu.assertEquals(rc, 0, out)
  local straight = result(out)
  lu.assertEquals(straight.steps, STEPS, out)
  lu.assertFalse(straight.interrupted)
  -- a quarter of the signals come at a random moment of the start (the resume, the first
  -- steps); the others a random moment after a random step, so that the interrupts take
  -- about half of the steps left each time.  (mpirun loses a SIGINT that comes while it is
  -- still starting the job: its signals come after a step.)
  math.randomseed(SEED)
  local why = string.format("%s, GLIMPSE_TEST_SEED=%d", where, SEED)
  local interrupts, kinds, last_step = 0, {}, 0
  for attempt = 1, 3 * INTERRUPTS do
    local signal, slow_ms, at_start = table.unpack(signals[interrupts % #signals + 1])
    local when
    if at_start ~= false and math.random() < 0.25 and last_step < STEPS - MARGIN then
      when = {"ready", math.random() * 0.02}
    else
      local ahead = math.max(1, (STEPS - MARGIN - last_step) // (INTERRUPTS - interrupts))
      when = {"go", math.random() * 0.01,
              {math.min(STEPS - 1, last_step + math.random(1, ahead)), slow_ms}}
    end
    out, rc = run(b, distributed, when, signal)
    lu.assertNotEquals(rc, 124, "the run hung (" .. why .. ", signal: " .. signal .. "):\n" .. out)
    local r = result(out)
    if r and not r.interrupted then        -- the signal came after the run had ended
      lu.assertEquals(r.steps, STEPS, out)
      break
    end
    interrupts = interrupts + 1
    -- stopped at a step boundary with a checkpoint of that step, said on rank 0; or (the
    -- signal before fit() began, or in its last instructions) the error "interrupted!"
    local step = tonumber(out:match("interrupted at step (%d+) of " .. STEPS))
    local kind = step and "checkpoint" or (out:find("interrupted!", 1, true) and "outside fit")
                 or ("other (rc " .. tostring(rc) .. ")")
    kinds[kind] = (kinds[kind] or 0) + 1
    if os.getenv("TRACE") then
      io.stderr:write(string.format("%s %.4f %s -> %s %s\n", when[1], when[2],
                                    tostring(when[3] and when[3][1]), kind, tostring(step)))
    end
    lu.assertNotEquals(kind:sub(1, 5), "other", "an interrupt with neither a checkpoint nor "
                       .. "the error (" .. why .. ", signal: " .. signal .. "):\n" .. out)
    if step then
      lu.assertTrue(step >= last_step, out)
      last_step = step
      local _, meta = glimpse.load(b .. "/ck.safetensors")
      local st = glimpse.util.json_decode(meta.trainer)
      lu.assertEquals(math.tointeger(st.step), step, "the checkpoint holds the step it says")
    end
    if interrupts == INTERRUPTS then break end
    lu.assertTrue(attempt < 3 * INTERRUPTS, "too many runs finished before the signal")
  end
  lu.assertEquals(interrupts, INTERRUPTS, why .. ": the run ended before " .. INTERRUPTS ..
                  " interrupts (at step " .. last_step .. ")")
  lu.assertTrue((kinds.checkpoint or 0) >= INTERRUPTS // 2, why .. ": " .. show(kinds))
  out, rc = run(b, distributed)                         -- the rest, uninterrupted
  lu.assertEquals(rc, 0, out)
  local resumed = result(out)
  lu.assertEquals(resumed.steps, STEPS, out)
  lu.assertEquals(resumed.losses, straight.losses, why .. ": one history.losses entry per "
                  .. "log interval, none per interrupt")
  lu.assertEquals(resumed.evals, straight.evals, why)
  assert_same_bits(a .. "/params.safetensors", b .. "/params.safetensors", why)
  return kinds
end

function T.test_twenty_sigints_then_resumed_equals_a_straight_run_bit_for_bit()
  interrupted_equals_straight(false, {{"kill -INT $pid0", 10}})
end

function T.test_twenty_sigints_on_two_ranks_then_resumed_equals_a_straight_run()
  lu.skipIf(not have_mpirun(), "mpirun is not installed (make test installs openmpi-bin)")
  -- one rank, the other, mpirun (Ctrl-C at a terminal: SIGTERM to the ranks; steps of 25 ms
  -- then, as it passes it on up to a second later), every rank
  interrupted_equals_straight(true, {{"kill -INT $pid1", 10}, {"kill -INT $pid0", 10},
                                     {"kill -INT $(pgrep -P $pid mpirun)", 25, false},
                                     {"kill -INT $pid0 $pid1", 10}})
end

return T
