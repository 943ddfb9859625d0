--- glimpse.train's Ctrl-C rule (a part of the Trainer; train/init.lua merges its methods).
--
-- The rule: a Ctrl-C never splits a step.  The step in progress finishes as one unit (its
-- update, schedule step, bookkeeping, and the evaluation and checkpoint due after it); then
-- fit() stops, writes the checkpoint and returns the history with interrupted = true.  The
-- checkpoint holds the data position, RNG states and history after that last complete step,
-- so the run it resumes gives the bits an uninterrupted run gives.  One exception: an
-- evaluation in progress in a single process is abandoned (its random draws undone) and runs
-- again on resume, since an evaluation may take minutes.  A second Ctrl-C ends the process
-- at once (the checkpoint on disk is then the last one written).
--
-- How the signal reaches Lua: the glimpse executable answers SIGINT the way lua.c does, with
-- a C hook on the main thread that raises "interrupted!" at its next instruction, and under
-- an MPI launcher glimpse.dist does the same for SIGTERM (what mpirun sends every rank on
-- Ctrl-C).  fit() runs the whole run in a coroutine, which that hook does not reach, and
-- looks for a pending hook at step boundaries (an "external hook" on the main thread); one it
-- finds is taken off there, so nothing raises.
--
-- Data parallel (distributed = true): the ranks decide together, at step boundaries only --
-- every step's gradient allreduce carries each rank's interrupt flag, fit() agrees once more
-- at the start and at the end -- so every rank stops after the same step whether the signal
-- reached every rank (mpirun) or one; rank 0 writes the checkpoint, and no rank leaves fit()
-- before it is written.  Evaluations are never abandoned there (the ranks could disagree).
local Trainer = {}

-- the main thread, where the executable's interrupt hook is set
local MAIN = debug.getregistry()[1]

--- Trainer._is_interrupt(err) -> whether err is the executable's Ctrl-C error
function Trainer._is_interrupt(err)
  return type(err) == "string" and err:match("interrupted!$") ~= nil
end

-- whether a Ctrl-C has come during this fit(): a pending hook is taken off the main thread
-- and remembered (this rank's flag for the agreement under MPI)
function Trainer:_interrupt_seen()
  if not self.sigint and debug.gethook(MAIN) == "external hook" then
    debug.sethook(MAIN)
    self.sigint = true
  end
  return self.sigint == true
end

-- at a step boundary: stop here?  One process: its own flag.  Data parallel: what the
-- ranks agreed in the last step's allreduce (parallel.lua's _shard_step)
function Trainer:_stop_requested()
  if self.bucket then return self.stop_agreed == true end
  return self:_interrupt_seen()
end

-- the agreement outside the steps (start and end of fit): true on every rank when any
-- rank has seen a Ctrl-C
function Trainer:_agree_interrupt()
  local seen = self:_interrupt_seen()
  if self.bucket then self.stop_agreed = self:_any_rank(seen) end
  return self.bucket and self.stop_agreed or seen
end

-- fn(self, ...) with the evaluation interruptible (one process): a count hook on this
-- coroutine raises "interrupted!" once a Ctrl-C is pending on the main thread.  An error
-- leaves the hook for _end_interruptible to take off.
function Trainer:_interruptible(fn, ...)
  if self.bucket or debug.gethook() ~= nil then return fn(self, ...) end
  self.eval_hook = self.eval_hook or function()
    if self:_interrupt_seen() then
      debug.sethook()
      error("interrupted!", 0)
    end
  end
  debug.sethook(self.eval_hook, "", 1000)
  local r = fn(self, ...)
  debug.sethook()
  return r
end

function Trainer:_end_interruptible()
  if self.eval_hook and debug.gethook() == self.eval_hook then debug.sethook() end
end

return Trainer
