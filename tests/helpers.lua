-- tests/helpers.lua -- what the test suites share: local H = require "tests.helpers", or
-- local assert_close = require("tests.helpers").assert_close (the executable's package.path
-- has the source tree's root on it).
--
--   H.assert_close(actual, expected, tol, msg) -> err / scale
--       actual, expected: tensors, numbers or (nested) tables of numbers.
--       tol a number r:  max |a - b| <= r * max(max |b|, 1e-30)       (relative to the scale)
--       tol a table:     {rtol=, atol=0, floor=1e-30, per_element=false}
--         per_element = false: max |a - b| <= rtol * max(max |b|, floor) + atol
--         per_element = true:  |a_i - b_i| <= rtol * |b_i| + atol for every i (sizes only
--                              are compared, not shapes)
--       Tensors are compared shape for shape (unless per_element); NaN never passes.
--   H.gradcheck(fn, inputs, opts, msg)   glimpse.gradcheck that fails the test with msg
--   H.tmpdir() -> path      a fresh directory, removed when the suite ends (tests/run.lua
--                           calls H.cleanup) or by H.rmdir(path)
--   H.read_file(path) -> s  (nil when the file cannot be opened), H.write_file(path, s)
--   H.sh_quote(s) -> s quoted for a POSIX shell;  H.ls(dir) -> sorted names in dir
--   H.browser_check(page, width) -> {images=, broken=, list=, scroll=, inner=, body=}: the page
--       (an index.html) as headless Chromium shows it in a window `width` px wide, through a
--       copy with a check script added; skips the test without chromium (fails under CI=true)
local lu = require "luaunit"
local glimpse = require "glimpse"

local H = {}

local function flat(v, out)
  out = out or {}
  if glimpse.is_tensor(v) then
    local t = glimpse.no_grad(function() return v:detach():reshape(-1):totable() end)
    for _, x in ipairs(t) do out[#out + 1] = x end
  elseif type(v) == "table" then
    for _, x in ipairs(v) do flat(x, out) end
  else
    out[#out + 1] = v
  end
  return out
end

local function shape_of(v)
  return glimpse.is_tensor(v) and "{" .. table.concat(v.shape, ",") .. "}" or nil
end

local function tolerances(tol)
  if type(tol) == "number" then return tol, 0, 1e-30, false end
  if type(tol) ~= "table" or type(tol.rtol or 0) ~= "number" then
    error("assert_close: tol must be a number or {rtol=, atol=, floor=, per_element=}", 3)
  end
  return tol.rtol or 0, tol.atol or 0, tol.floor or 1e-30, tol.per_element and true or false
end

--- H.assert_close(actual, expected, tol, msg) -> the relative error err / scale (max-norm)
function H.assert_close(actual, expected, tol, msg)
  msg = msg or "assert_close"
  local rtol, atol, floor, per_element = tolerances(tol)
  if not per_element and glimpse.is_tensor(actual) and glimpse.is_tensor(expected) then
    lu.assertEquals(shape_of(actual), shape_of(expected), msg .. ": shapes differ")
  end
  local fa, fb = flat(actual), flat(expected)
  lu.assertEquals(#fa, #fb, msg .. ": sizes differ")
  if per_element then
    local worst, wi = -math.huge, 0
    for i = 1, #fa do
      local excess = math.abs(fa[i] - fb[i]) - (rtol * math.abs(fb[i]) + atol)
      if excess ~= excess then excess = math.huge end
      if excess > worst then worst, wi = excess, i end
    end
    if worst > 0 then
      lu.fail(string.format("%s: element %d: got %.9g, expected %.9g (rtol %g, atol %g)", msg,
                            wi, fa[wi], fb[wi], rtol, atol))
    end
    return 0
  end
  local err, scale, wi = 0, 0, 0
  for i = 1, #fa do
    local d = math.abs(fa[i] - fb[i])
    if d ~= d then d = math.huge end
    if d > err then err, wi = d, i end
    scale = math.max(scale, math.abs(fb[i]))
  end
  scale = math.max(scale, floor)
  if err > rtol * scale + atol then
    lu.fail(string.format("%s: max error %.3g at element %d (got %.9g, expected %.9g) " ..
                          "exceeds %.3g (scale %.3g)", msg, err, wi, fa[wi], fb[wi],
                          rtol * scale + atol, scale))
  end
  return err / scale
end

--- H.gradcheck(fn, inputs, opts, msg): glimpse.gradcheck(fn, inputs, opts); a failure fails
--- the test with msg and gradcheck's report
function H.gradcheck(fn, inputs, opts, msg)
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.raise = false
  local ok, report = glimpse.gradcheck(fn, inputs, o)
  if not ok then lu.fail((msg or "gradcheck") .. ": " .. tostring(report)) end
  return true
end

-- ---------------------------------------------------------------------------------------
-- files

function H.sh_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local made = {}

--- H.tmpdir() -> the path of a new empty directory (removed by H.cleanup)
function H.tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p " .. H.sh_quote(d)))
  made[#made + 1] = d
  return d
end

--- H.rmdir(path): remove a directory and everything in it
function H.rmdir(d)
  os.execute("rm -rf " .. H.sh_quote(d))
end

--- H.cleanup(): remove every directory H.tmpdir made (tests/run.lua calls it after a suite)
function H.cleanup()
  for i = #made, 1, -1 do
    H.rmdir(made[i])
    made[i] = nil
  end
end

--- H.read_file(path) -> the file's bytes, or nil when it cannot be opened
function H.read_file(p)
  local f = io.open(p, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

--- H.write_file(path, s)
function H.write_file(p, s)
  local f = assert(io.open(p, "wb"))
  f:write(s)
  f:close()
end

--- H.ls(dir) -> the sorted names in dir (hidden ones too, not . and ..)
function H.ls(d)
  local names = {}
  local p = io.popen("ls -a " .. H.sh_quote(d))
  for n in p:lines() do
    if n ~= "." and n ~= ".." then names[#names + 1] = n end
  end
  p:close()
  table.sort(names)
  return names
end

local CHECK_SCRIPT = [[<script>
window.addEventListener("load", function () {
  var imgs = document.images, bad = [];
  for (var i = 0; i < imgs.length; i++) {
    if (!imgs[i].complete || imgs[i].naturalWidth === 0) bad.push(imgs[i].getAttribute("src"));
  }
  var out = document.createElement("pre");
  out.id = "checks";
  out.textContent = "CHECK images=" + imgs.length + " broken=" + bad.length + " [" + bad.join(",") +
    "] scrollWidth=" + document.documentElement.scrollWidth + " innerWidth=" + window.innerWidth +
    " bodyScrollWidth=" + document.body.scrollWidth + " END";
  document.body.appendChild(out);
});
</script>]]

local function find_chromium()
  for _, name in ipairs({"chromium", "chromium-browser"}) do
    local p = io.popen("command -v " .. name .. " 2>/dev/null")
    local path = p:read("l")
    p:close()
    if path and path ~= "" then return path end
  end
  return nil
end

--- H.dump_dom(page, width, script) -> the DOM headless Chromium makes of page (a file) at
--- width px after the page has loaded, with script (a <script> element's text) added at the
--- end of its body; skips the test when chromium is not installed (fails under CI)
function H.dump_dom(page, width, script)
  local chromium = find_chromium()
  if not chromium then
    if os.getenv("CI") == "true" then
      lu.fail("chromium is not installed (Debian package chromium; make test installs it)")
    end
    lu.skip("chromium is not installed (Debian package chromium): browser check skipped")
  end
  local html = assert(H.read_file(page), "cannot read " .. page)
  local dir = page:match("^(.*)/[^/]*$") or "."
  local copy = dir .. "/browser_check.html"
  H.write_file(copy, (html:gsub("</body>", function() return script .. "</body>" end, 1)))
  local work = H.tmpdir()
  local cmd = string.format("timeout 120 %s --headless --no-sandbox --disable-gpu --disable-quic "
                            .. "--no-first-run --disable-background-networking "
                            .. "--disable-component-update --disable-sync --user-data-dir=%s "
                            .. "--window-size=%d,900 --virtual-time-budget=5000 --dump-dom "
                            .. "file://%s 2>%s/stderr.txt",
                            H.sh_quote(chromium), H.sh_quote(work), width, H.sh_quote(copy),
                            H.sh_quote(work))
  local p = io.popen(cmd)
  local dom = p:read("a")
  p:close()
  os.remove(copy)
  return dom, work
end

--- H.wait_for(pred, seconds) -> true once pred() is true, polled every 0.1 s; pred()'s last
--- answer after `seconds`
function H.wait_for(pred, seconds)
  local util = require "glimpse.util"
  local t = util.Timer()
  while t:elapsed() < seconds do
    if pred() then return true end
    os.execute("sleep 0.1")
  end
  return pred()
end

--- H.run(cmd) -> ok, exit code, output (stdout and stderr) of a shell command
function H.run(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  local ok, _, code = p:close()
  return ok == true, code, out
end

--- H.browser_check(page, width) -> facts of the page as headless Chromium lays it out at
--- width px: images (count), broken (not loaded), list (their srcs), scroll (the document's
--- scrollWidth), inner (innerWidth), body (body.scrollWidth)
function H.browser_check(page, width)
  local dom, work = H.dump_dom(page, width, CHECK_SCRIPT)
  local line = dom:match("<pre id=\"checks\">(.-)</pre>")
  lu.assertNotNil(line, "no check line in the DOM; chromium said: "
                  .. (H.read_file(work .. "/stderr.txt") or ""):sub(1, 2000))
  return {images = tonumber(line:match("images=(%d+)")), broken = tonumber(line:match("broken=(%d+)")),
          list = line:match("%[(.-)%]"), scroll = tonumber(line:match(" scrollWidth=(%d+)")),
          inner = tonumber(line:match("innerWidth=(%d+)")),
          body = tonumber(line:match("bodyScrollWidth=(%d+)")), line = line}
end

return H
