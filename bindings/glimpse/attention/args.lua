--- glimpse.attention.args -- what the files of glimpse.attention share: argument checks whose
-- errors name the public function, and the re-raise of a core op's error under that name.
local glimpse = require "glimpse"
local check = require "glimpse.check"

local M = {}

-- masked softmax tails are exact zeros; this keeps logs of those zeros finite
M.LOG_EPS = 1e-12

-- Call f (a C primitive or a core op) on behalf of the public function fname: an error it
-- raises is re-raised at fname's caller, prefixed with fname ("attention.attend: bad argument
-- #1 to 'context' ..."), so the message names what the user called.  Two results at most.
function M.named(fname, f, ...)
  local ok, a, b = pcall(f, ...)
  if ok then return a, b end
  local msg = check.strip(a)
  if msg:find("to '?'", 1, true) then   -- an argument error: the C function has no name here
    msg = msg:gsub("to '%?'", "to '" .. fname .. "'", 1)
  else
    msg = fname .. ": " .. msg
  end
  error(msg, 3)
end

-- a mask (or prior) given as a tensor, a nested table or nil
function M.as_tensor(x, fname)
  if x == nil or glimpse.is_tensor(x) then return x end
  if type(x) ~= "table" then
    check.fail(3, "%s: a mask must be a tensor, a table or nil, got %s", fname or "attention",
               type(x))
  end
  return M.named(fname or "attention", glimpse.tensor, x)
end

-- x must be a tensor (of `dims` dims when given); fname names the public function
function M.check_tensor(x, what, dims, level, fname)
  fname = fname or "attention"
  if not glimpse.is_tensor(x) then
    check.fail(level + 1, "%s: %s must be a tensor, got %s", fname, what, type(x))
  end
  if dims and x:dim() ~= dims then
    check.fail(level + 1, "%s: %s must have %d dims, got shape %s", fname, what, dims,
               check.shape(x))
  end
  return x
end

-- opts must be a table or nil
function M.check_opts(opts, fname, level)
  if opts ~= nil and type(opts) ~= "table" then
    check.fail(level + 1, "%s: opts must be a table or nil, got %s", fname, type(opts))
  end
  return opts
end

return M
