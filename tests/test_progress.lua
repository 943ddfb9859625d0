-- tests/test_progress.lua -- glimpse.progress (bindings/glimpse/progress.lua): the plain
-- log lines and terminal redraws of progress.Bar, its rate/ETA arithmetic, pause/resume,
-- progress.range and progress.format_time.  Time comes from an injected clock and output
-- goes to a fake file, so nothing depends on the machine's speed or on a terminal.
local lu = require "luaunit"
local glimpse = require "glimpse"
local progress = glimpse.progress

local T = {}

local TIME_TOL = 1e-9

-- a fake output file that records what is written
local function sink()
  local s = {parts = {}}
  function s:write(...)
    for i = 1, select("#", ...) do self.parts[#self.parts + 1] = tostring((select(i, ...))) end
    return self
  end
  function s:flush() return self end
  function s:text() return table.concat(self.parts) end
  function s:lines()
    local out = {}
    for l in self:text():gmatch("([^\n]*)\n") do out[#out + 1] = l end
    return out
  end
  return s
end

-- a clock the test moves by hand
local function fake_clock()
  local c = {now = 100}
  c.fn = function() return c.now end
  return c
end

function T.test_format_time_minutes_hours_and_unknown()
  lu.assertEquals(progress.format_time(0), "0:00")
  lu.assertEquals(progress.format_time(59.4), "0:59")
  lu.assertEquals(progress.format_time(59.6), "1:00")
  lu.assertEquals(progress.format_time(754), "12:34")
  lu.assertEquals(progress.format_time(3600), "1:00:00")
  lu.assertEquals(progress.format_time(3 * 3600 + 25 * 60 + 7), "3:25:07")
  lu.assertEquals(progress.format_time(-5), "0:00")
  lu.assertEquals(progress.format_time(nil), "?")
  lu.assertEquals(progress.format_time(0 / 0), "?")
  lu.assertEquals(progress.format_time(math.huge), "?")
end

function T.test_eta_and_rate_from_the_average_pace()
  local clk, out = fake_clock(), sink()
  local bar = progress.Bar{total = 10, clock = clk.fn, out = out, tty = false}
  clk.now = clk.now + 8
  bar:update(4)                                   -- 4 items in 8 s: 0.5 it/s, 6 left: 12 s
  lu.assertAlmostEquals(bar:elapsed(), 8, TIME_TOL)
  lu.assertAlmostEquals(bar:rate(), 0.5, TIME_TOL)
  lu.assertAlmostEquals(bar:eta(), 12, TIME_TOL)
  lu.assertStrContains(out:text(), "4/10 ( 40%)  2.00 s/it  elapsed 0:08  ETA 0:12")
  -- a time limit caps the ETA
  local b2 = progress.Bar{total = 10, clock = clk.fn, out = sink(), tty = false, time_limit = 10}
  clk.now = clk.now + 8
  b2:update(4)
  lu.assertAlmostEquals(b2:eta(), 2, TIME_TOL)
end

function T.test_paused_time_does_not_count()
  local clk = fake_clock()
  local bar = progress.Bar{total = 100, clock = clk.fn, out = sink(), tty = false}
  clk.now = clk.now + 10
  bar:update(20)
  bar:pause()
  clk.now = clk.now + 1000                        -- evaluation, not counted
  lu.assertAlmostEquals(bar:elapsed(), 10, TIME_TOL)
  bar:resume()
  clk.now = clk.now + 10
  bar:update(40)
  lu.assertAlmostEquals(bar:elapsed(), 20, TIME_TOL)
  lu.assertAlmostEquals(bar:rate(), 2, TIME_TOL)
  lu.assertAlmostEquals(bar:eta(), 30, TIME_TOL)
end

function T.test_plain_lines_every_k_items_with_fields_in_order()
  local clk, out = fake_clock(), sink()
  local bar = progress.Bar{total = 100, every = 25, label = "train", clock = clk.fn, out = out,
                           tty = false, fields = {"loss", "acc"}, formats = {acc = "%.1f%%"}}
  for i = 1, 100 do
    clk.now = clk.now + 0.1
    bar:update(i, {loss = 1 / i, acc = i, lr = 0.001})
  end
  local total = bar:finish()
  local lines = out:lines()
  -- the first update, then 25, 50, 75, 100, then the final line
  lu.assertEquals(#lines, 6)
  lu.assertEquals(lines[1], "train    1/100 (  1%)  10.0 it/s  elapsed 0:00  ETA 0:10  "
                            .. "loss 1  acc 1.0%  lr 0.001")
  lu.assertEquals(lines[3], "train   50/100 ( 50%)  10.0 it/s  elapsed 0:05  ETA 0:05  "
                            .. "loss 0.02  acc 50.0%  lr 0.001")
  lu.assertEquals(lines[6], "train  100/100 (100%)  10.0 it/s  elapsed 0:10  done  "
                            .. "loss 0.01  acc 100.0%  lr 0.001")
  lu.assertAlmostEquals(total, 10, 1e-6)
  lu.assertNil(out:text():find("\r", 1, true))    -- no carriage returns in a log
end

function T.test_plain_lines_every_t_seconds_when_items_are_slow()
  local clk, out = fake_clock(), sink()
  local bar = progress.Bar{total = 1000, every = 500, interval = 60, clock = clk.fn, out = out,
                           tty = false}
  for i = 1, 10 do
    clk.now = clk.now + 25
    bar:update(i)
  end
  -- lines at item 1 (t=25), then when 60 s passed since the last: items 4 (t=100), 7 (t=175), 10
  local lines = out:lines()
  lu.assertEquals(#lines, 4)
  lu.assertStrContains(lines[2], "   4/1000")
  lu.assertStrContains(lines[4], "  10/1000")
end

function T.test_absolute_updates_that_jump_past_a_multiple_still_print()
  local clk, out = fake_clock(), sink()
  local bar = progress.Bar{total = 1000, every = 100, clock = clk.fn, out = out, tty = false}
  for n = 64, 1000, 64 do bar:update(n) end      -- never a multiple of 100
  lu.assertEquals(#out:lines(), 10)               -- the first, then one per hundred crossed
  local c = progress.Bar{clock = clk.fn, out = sink(), tty = false}
  c:advance(3):advance()
  lu.assertEquals(c.count, 4)
end

function T.test_show_prints_now_but_not_twice_for_the_same_count()
  local clk, out = fake_clock(), sink()
  local bar = progress.Bar{total = 100, every = 50, clock = clk.fn, out = out, tty = false}
  for i = 1, 30 do clk.now = clk.now + 1; bar:update(i) end
  bar:show()
  bar:show()
  for i = 31, 50 do clk.now = clk.now + 1; bar:update(i) end
  bar:show()
  local lines = out:lines()
  lu.assertEquals(#lines, 3)                     -- item 1, the show at 30, item 50
  lu.assertStrContains(lines[2], " 30/100")
  lu.assertStrContains(lines[3], " 50/100")
end

function T.test_terminal_mode_redraws_one_line_at_most_ten_times_a_second()
  local clk, out = fake_clock(), sink()
  local bar = progress.Bar{total = 1000, clock = clk.fn, out = out, tty = true, label = "ep"}
  for i = 1, 1000 do
    clk.now = clk.now + 0.001                     -- 1000 items in 1 s
    bar:update(i, {loss = 0.5})
  end
  bar:finish()
  local text = out:text()
  local draws = select(2, text:gsub("\r", ""))
  lu.assertTrue(draws >= 10 and draws <= 13, "redraws: " .. draws)
  lu.assertEquals(select(2, text:gsub("\n", "")), 1)   -- one newline, at the end
  lu.assertStrContains(text, "[####################]")
  lu.assertStrContains(text, "1000/1000 (100%)")
  lu.assertStrContains(text, "loss=0.5")
end

function T.test_print_keeps_the_bar_intact()
  local clk, out = fake_clock(), sink()
  local bar = progress.Bar{total = 10, clock = clk.fn, out = out, tty = true}
  bar:update(3)
  bar:print("valid", 0.5)
  local text = out:text()
  lu.assertStrContains(text, "\rvalid\t0.5\n")
  lu.assertTrue(text:find("3/10", #text - 60, true) ~= nil)   -- redrawn after the message
  local plain = sink()
  local pb = progress.Bar{total = 10, clock = clk.fn, out = plain, tty = false}
  pb:print("hello")
  lu.assertEquals(plain:text(), "hello\n")
end

function T.test_range_iterates_and_finishes()
  local clk, out = fake_clock(), sink()
  local seen = {}
  for i, bar in progress.range(5, {label = "eval", every = 2, clock = clk.fn, out = out,
                                   tty = false}) do
    clk.now = clk.now + 1
    seen[#seen + 1] = i
    bar:set{i = i}
  end
  lu.assertEquals(seen, {1, 2, 3, 4, 5})
  local lines = out:lines()
  lu.assertStrContains(lines[#lines], "eval  5/5 (100%)  1.0 it/s  elapsed 0:05  done  i 5")
  local n = 0
  for _ in progress.range(0, {out = sink()}) do n = n + 1 end
  lu.assertEquals(n, 0)
end

function T.test_finish_is_idempotent_and_closes_the_bar()
  local clk, out = fake_clock(), sink()
  do
    local bar <close> = progress.Bar{total = 3, clock = clk.fn, out = out, tty = false}
    bar:update(3)
  end
  lu.assertStrContains(out:text(), "done")
  local bar = progress.Bar{total = 3, clock = clk.fn, out = out, tty = false}
  bar:finish()
  local before = out:text()
  bar:finish()
  lu.assertEquals(out:text(), before)
  lu.assertErrorMsgContains("the bar is finished", function() bar:update(1) end)
end

-- run a one-line glimpse program in a child process (stdout a pipe) and return its output
local function child(env, code)
  local exe = arg and arg[-1] or "build/glimpse"
  local p = io.popen(string.format("%s %s -e '%s'", env, exe, code))
  local s = p:read("a")
  p:close()
  return s
end

function T.test_pipes_get_plain_lines_unless_the_environment_says_tty()
  lu.assertEquals(type(glimpse._isatty(1)), "boolean")
  local code = "local b = glimpse.progress.Bar{total = 3}; for i = 1, 3 do b:update(i) end; b:finish()"
  local plain = child("GLIMPSE_PROGRESS=", code)
  lu.assertNil(plain:find("\r", 1, true))
  lu.assertStrContains(plain, "3/3 (100%)")
  local forced = child("GLIMPSE_PROGRESS=tty", code)
  lu.assertNotNil(forced:find("\r", 1, true))
  lu.assertStrContains(forced, "[####################]")
  local bar = progress.Bar{total = 2, out = sink()}
  lu.assertFalse(bar.tty)                       -- not a standard stream: plain
end

function T.test_bad_options_give_clear_errors()
  lu.assertErrorMsgContains("progress.Bar: option 'total' must be a positive integer",
                            progress.Bar, {total = -3})
  lu.assertErrorMsgContains("option 'every' must be a positive integer", progress.Bar,
                            {every = 0.5})
  lu.assertErrorMsgContains("option 'clock' must be a function", progress.Bar, {clock = 3})
  lu.assertErrorMsgContains("expected an options table", progress.Bar, 10)
  lu.assertErrorMsgContains("progress.range: n must be a non-negative integer", progress.range, -1)
  local bar = progress.Bar{out = sink(), tty = false}
  lu.assertErrorMsgContains("count must be a number", bar.update, bar, "x")
  lu.assertErrorMsgContains("fields must be a table", bar.update, bar, 1, 5)
end

return T
