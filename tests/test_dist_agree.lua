-- tests/test_dist_agree.lua -- ranks that disagree never hang and never get wrong values:
-- every collective of glimpse.dist first exchanges a header (call, op, root, shape), so a
-- mismatch fails on every rank with one message; a rank that ends its script or fails while
-- another waits in a collective ends the whole job (bindings/l_dist.c).  Runs under
-- `mpirun -np 2`; skipped where mpirun is not installed.
local lu = require "luaunit"
local H = require "tests.helpers"

local T = {}

local EXE = arg and arg[-1] or "build/glimpse"
local TIMEOUT = 60             -- seconds: a hang fails the test instead of stopping the run

local function mpirun(script_text)
  lu.skipIf(os.execute("command -v mpirun > /dev/null 2>&1") ~= true,
            "mpirun is not installed (make test installs openmpi-bin)")
  local d = H.tmpdir()
  local path = script_text:match("%.lua$") and script_text or d .. "/script.lua"
  if path ~= script_text then H.write_file(path, script_text) end
  local asan = (os.getenv("ASAN_OPTIONS") or "") .. ":detect_leaks=0"
  local line = string.format("ASAN_OPTIONS=%s timeout %d mpirun -np 2 --allow-run-as-root "
                             .. "--oversubscribe %s %s > %s/out 2>&1; echo $? > %s/rc",
                             H.sh_quote(asan), TIMEOUT, H.sh_quote(EXE), H.sh_quote(path), d, d)
  os.execute(line)
  return H.read_file(d .. "/out") or "", tonumber(H.read_file(d .. "/rc"))
end

function T.test_mismatched_collectives_fail_on_every_rank_with_one_message()
  local out, rc = mpirun("tests/dist/disagree.lua")
  lu.assertEquals(rc, 0, out)
  for _, r in ipairs({0, 1}) do
    lu.assertStrContains(out, string.format("rank %d count: glimpse.dist.allreduce: the ranks " ..
      "disagree: rank 0 calls allreduce (sum) of [4]; rank 1 calls allreduce (sum) of [8]", r))
    lu.assertStrContains(out, string.format("rank %d op: glimpse.dist.allreduce: the ranks " ..
      "disagree: rank 0 calls allreduce (sum) of [3]; rank 1 calls allreduce (max) of [3]", r))
    lu.assertStrContains(out, string.format("rank %d shape: glimpse.dist.allreduce: the ranks " ..
      "disagree: rank 0 calls allreduce (sum) of [2,3]; rank 1 calls allreduce (sum) of [3,2]", r))
    lu.assertStrContains(out, string.format("rank %d gather: glimpse.dist.allgather: the ranks " ..
      "disagree: rank 0 calls allgather of [2]; rank 1 calls allgather of [5]", r))
    lu.assertStrContains(out, string.format("rank %d root: glimpse.dist.broadcast: the ranks " ..
      "disagree: rank 0 calls broadcast from rank 0 of [2]; rank 1 calls broadcast from rank 1 " ..
      "of [2]", r))
    lu.assertStrContains(out, string.format("rank %d good: ok", r))
  end
  lu.assertStrContains(out, "rank 0 call: glimpse.dist.barrier: the ranks disagree: rank 0 " ..
                            "calls barrier; rank 1 calls broadcast from rank 0 of [2]")
  lu.assertStrContains(out, "rank 1 call: glimpse.dist.broadcast: the ranks disagree")
end

function T.test_a_rank_that_exits_while_another_waits_ends_the_job()
  for _, ending in ipairs({"os.exit(0)", "return"}) do
    local out, rc = mpirun(string.format([[
      local dist = glimpse.dist
      dist.init()
      if dist.rank() == 0 then %s end
      dist.allreduce(glimpse.ones(3), "sum")
      print("rank 1 went on")]], ending))
    lu.assertNotEquals(rc, 0, out)
    lu.assertNotEquals(rc, 124, "the job hung:\n" .. out)
    lu.assertStrContains(out, "rank 0 ended its script while another rank waits in a collective")
    lu.assertStrContains(out, "rank 1 calls allreduce (sum) of [3]")
    lu.assertNotStrContains(out, "rank 1 went on")
  end
end

function T.test_a_rank_that_fails_ends_the_job()
  local out, rc = mpirun([[
    local dist = glimpse.dist
    dist.init()
    if dist.rank() == 0 then error("rank 0 fails here") end
    dist.allreduce(glimpse.ones(3), "sum")
    print("rank 1 went on")]])
  lu.assertNotEquals(rc, 0, out)
  lu.assertNotEquals(rc, 124, "the job hung:\n" .. out)
  lu.assertStrContains(out, "rank 0 fails here")
  lu.assertNotStrContains(out, "rank 1 went on")
end

function T.test_ranks_that_agree_end_cleanly()
  local out, rc = mpirun([[
    local dist = glimpse.dist
    dist.init()
    local t = dist.allreduce(glimpse.ones(2, 3), "sum")
    dist.barrier()
    if dist.rank() == 0 then print("sum " .. t:sum():item()) end]])
  lu.assertEquals(rc, 0, out)
  lu.assertStrContains(out, "sum 12")
end

return T
