--- glimpse.cli.help -- `?name` at the REPL: the documentation of a function, class or module.
--
-- Three sources, the first two read on first use and kept:
--   1. the `---` doc comments of the Lua library (every file under the folder above cli/)
--      and of datasets/ (the source tree's, or the copy `make install` puts beside the
--      library): a block starts at a `---` line; its first line names what it documents
--      ("nn.LSTM(din, hidden, ...)", "cap:caption(image, opts)"), and so does the
--      `function X:y` line under it.  A dataset file's module functions are also named as
--      glimpse.data reaches them ("seq2seq.from_pairs", "data.seq2seq.from_pairs"): the
--      file's first line gives its registry name in parentheses ("(glimpse.data.seq2seq)"),
--      else the file's name is it;
--   2. the manual, docs/api/*.md (the source tree's, or the copy `make install` puts in
--      $(PREFIX)/share/glimpse/docs): a section whose heading names the function, or a
--      paragraph whose first line starts with it;
--   3. the value itself: a class that carries `options` (a glimpse.options spec) gets its
--      option table listed (name, type, default, range or choices, help); a value with an
--      `about` method (a captioner: what it was trained on) gets its text.
-- A name is looked up with and without its "glimpse." prefix; ':' and '.' are the same.
local M = {}

local MAX_HITS = 6          -- entries printed for one name
local MAX_SECTION_LINES = 40
local MAX_SUGGESTIONS = 6
local MAX_NAME = 200        -- longer text is no name: answered at once, never searched

-- the library's folder: the one above cli/, where this file lives
local function here()
  local src = debug.getinfo(1, "S").source
  return src:sub(1, 1) == "@" and src:sub(2):match("^(.*)/cli/[^/]*$") or "."
end

local function shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function list_files(dir, pattern)
  local p = io.popen("find " .. shell_quote(dir) .. " -name " .. shell_quote(pattern) ..
                     " -type f 2>/dev/null | sort")
  if not p then return {} end
  local out = {}
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return out
end

local function read_lines(path)
  local f = io.open(path, "r")
  if not f then return {} end
  local lines = {}
  for l in f:lines() do lines[#lines + 1] = l end
  f:close()
  return lines
end

-- "glimpse.nn.LSTM" / "nn:LSTM" -> "nn.LSTM"
local function normalise(name)
  name = name:gsub("^%s+", ""):gsub("%s+$", ""):gsub(":", ".")
  return (name:gsub("^glimpse%.", ""))
end

local function last_part(name)
  return name:match("([^%.]+)$") or name
end

-- ---------------------------------------------------------------------------------------
-- the `---` comments

local function strip_comment(line)
  return (line:gsub("^%s*%-%-%-? ?", ""))
end

-- the blocks of one file: {names = {...}, text =, file =, where =, line =, def_line =}; file
-- is the path the file is matched against a function's source by, where the one shown.
-- registry: a dataset file's name under glimpse.data (its module functions get it as aliases)
local function parse_lua(path, rel, where, registry)
  local lines = read_lines(path)
  local blocks = {}
  local i = 1
  while i <= #lines do
    local l = lines[i]
    if l:match("^%s*%-%-%-[^%-]") or l:match("^%s*%-%-%-$") then
      local first, text = i, {}
      while i <= #lines and lines[i]:match("^%s*%-%-") and
            not lines[i]:match("^%s*%-%- %-%-%-%-%-") do
        text[#text + 1] = strip_comment(lines[i])
        i = i + 1
      end
      local names = {}
      local sig = text[1]:match("^([%a_][%w_%.:]*)")
      if sig and (text[1]:match("^[%a_][%w_%.:]*%s*[%({]") or sig:find("[%.:]") or
                  text[1]:match("^[%a_][%w_%.:]*%s+%-%-")) then
        names[#names + 1] = normalise(sig)
      end
      local def = lines[i] or ""
      local fname = def:match("^%s*function%s+([%w_%.:]+)") or
                    def:match("^%s*local%s+function%s+([%w_]+)") or
                    def:match("^%s*([%w_%.]+)%s*=%s*function") or
                    def:match("^%s*local%s+([%w_]+)%s*=%s*[%w_%.]+:extend%(")
      if fname then names[#names + 1] = normalise(fname:gsub("^M[%.:]", "")) end
      local mfn = registry and (def:match("^%s*function%s+M%.([%w_]+)%s*%(") or
                                def:match("^%s*M%.([%w_]+)%s*="))
      if mfn then
        names[#names + 1] = registry .. "." .. mfn
        names[#names + 1] = "data." .. registry .. "." .. mfn
      end
      if #names > 0 then
        blocks[#blocks + 1] = {names = names, text = table.concat(text, "\n"), file = rel,
                               where = where, line = first, def_line = i}
      end
    else
      i = i + 1
    end
  end
  return blocks
end

-- ---------------------------------------------------------------------------------------
-- the manual

-- does `text` name `q` as a whole name (not inside a longer one)?
local function names_it(text, q)
  local s = 1
  while true do
    local a, b = text:find(q, s, true)
    if not a then return false end
    local before, after = text:sub(a - 1, a - 1), text:sub(b + 1, b + 1)
    if not before:match("[%w_%.:]") and not after:match("[%w_]") then return true end
    s = a + 1
  end
end

local function parse_md(path, rel)
  local lines = read_lines(path)
  local sections = {}
  for i, l in ipairs(lines) do
    local hashes, title = l:match("^(#+)%s+(.*)$")
    if hashes then
      local out = {l}
      for j = i + 1, #lines do
        local h = lines[j]:match("^(#+)%s")
        if (h and #h <= #hashes) or #out >= MAX_SECTION_LINES then break end
        out[#out + 1] = lines[j]
      end
      sections[#sections + 1] = {heading = title:gsub("`", ""),
                                 text = (table.concat(out, "\n"):gsub("%s+$", "")),
                                 file = rel, line = i, last = i + #out - 1}
    elseif (i == 1 or lines[i - 1]:match("^%s*$")) and l:match("^[%-%*]?%s*`?[%a_]") then
      local out = {}
      for j = i, math.min(#lines, i + MAX_SECTION_LINES - 1) do
        if lines[j]:match("^%s*$") then break end
        out[#out + 1] = lines[j]
      end
      -- a signature: the name followed by "(", "{", a closing backquote or " --"
      local lead = l:gsub("^[%-%*]?%s*`?", ""):match("^([%a_][%w_%.:]*)[%({`]") or
                   l:gsub("^[%-%*]?%s*`?", ""):match("^([%a_][%w_%.:]*) %-%-")
      if lead then
        sections[#sections + 1] = {lead = normalise(lead), text = table.concat(out, "\n"),
                                   file = rel, line = i, last = i + #out - 1}
      end
    end
  end
  return sections
end

-- ---------------------------------------------------------------------------------------
-- the index

local index

-- the docs/api folder: the source tree's (bindings/glimpse -> docs/api) or the installed
-- copy ($(PREFIX)/share/lua/5.4/glimpse -> $(PREFIX)/share/glimpse/docs/api)
local function docs_dir(lib)
  local root = lib:match("^(.*)/bindings/glimpse$") or lib:match("^(.*)/bindings/glimpse/")
  local prefix = lib:match("^(.*)/share/lua/[%d%.]+/glimpse")
  local candidates = {root and root .. "/docs/api", prefix and prefix .. "/share/glimpse/docs/api"}
  for i = 1, 2 do
    local d = candidates[i]
    local f = d and io.open(d, "r")
    if f then
      f:close()
      return d
    end
  end
  return nil
end

-- the datasets/ folder: the source tree's (bindings/glimpse -> datasets) or the installed
-- copy ($(PREFIX)/share/lua/5.4/glimpse/datasets)
local function datasets_dir(lib)
  local root = lib:match("^(.*)/bindings/glimpse$") or lib:match("^(.*)/bindings/glimpse/")
  for _, d in ipairs({root and root .. "/datasets" or false, lib .. "/datasets"}) do
    if d and #list_files(d, "*.lua") > 0 then return d end
  end
  return nil
end

-- a dataset file's name under glimpse.data: "(glimpse.data.NAME)" on its first line, else
-- the file's own name
local function registry_name(path)
  local first = read_lines(path)[1] or ""
  return first:match("%(glimpse%.data%.([%w_]+)%)") or path:match("([^/]+)%.lua$")
end

local function build()
  if index then return index end
  local lib = M.library_dir or here()
  local data = M.datasets_dir or datasets_dir(lib)
  index = {blocks = {}, sections = {}}
  local function add_blocks(blocks)
    for _, b in ipairs(blocks) do index.blocks[#index.blocks + 1] = b end
  end
  for _, f in ipairs(list_files(lib, "*.lua")) do
    local rel = f:sub(#lib + 2)
    if not (data and f:sub(1, #data + 1) == data .. "/") then   -- an installed datasets/: below
      add_blocks(parse_lua(f, rel, "bindings/glimpse/" .. rel))
    end
  end
  if data then
    for _, f in ipairs(list_files(data, "*.lua")) do
      local rel = "datasets/" .. f:sub(#data + 2)
      add_blocks(parse_lua(f, rel, rel, registry_name(f)))
    end
  end
  local docs = M.docs_dir or docs_dir(lib)
  if docs then
    for _, f in ipairs(list_files(docs, "*.md")) do
      local rel = "docs/api/" .. f:sub(#docs + 2)
      for _, s in ipairs(parse_md(f, rel)) do index.sections[#index.sections + 1] = s end
    end
  end
  return index
end

--- glimpse.repl.reset() -- forget the documentation read so far (it is read again on the
-- next lookup; for a library or manual edited while the REPL runs).
function M.reset()
  index = nil
end

-- the Lua function named by q in the running program, if any (to find its comment by line)
local function resolve(q)
  for _, path in ipairs({"glimpse." .. q, q}) do
    local v = _G
    for part in path:gmatch("[^%.]+") do
      if type(v) ~= "table" then v = nil break end
      local ok, x = pcall(function() return v[part] end)
      v = ok and x or nil
      if v == nil then break end
    end
    if v ~= nil then return v end
  end
  return nil
end

--- glimpse.repl.lookup(name) -> entries, suggestions
-- The documentation found for name ("glimpse.nn.LSTM", "nn.LSTM", "softmax", "cap:caption"):
-- a list of {title=, where= "file:line", text=}, best first; when it is empty, a list of
-- close names that do have documentation.
function M.lookup(name)
  if type(name) ~= "string" then
    error("repl.lookup: name must be a string, got " .. type(name), 2)
  end
  if #name > MAX_NAME then return {}, {} end
  local q = normalise(name)
  local idx = build()
  local hits, seen = {}, {}
  local function add(title, file, line, text)
    local key = file .. ":" .. line
    if seen[key] then return end
    seen[key] = true
    hits[#hits + 1] = {title = title, where = key, text = text}
  end
  if q == "" then return hits, {} end
  -- 1: a Lua function of that name: the comment right above its definition
  local v = resolve(q)
  if type(v) == "function" then
    local info = debug.getinfo(v, "S")
    for _, b in ipairs(idx.blocks) do
      if info.source:sub(-#b.file - 1) == "/" .. b.file and b.def_line == info.linedefined then
        add(b.names[1], b.where, b.line, b.text)
      end
    end
  end
  -- 2: a comment naming it exactly; 3: the manual
  for _, b in ipairs(idx.blocks) do
    for _, n in ipairs(b.names) do
      if n == q then add(n, b.where, b.line, b.text) break end
    end
  end
  local shown = {}   -- manual sections printed: a paragraph inside one is not repeated
  for _, s in ipairs(idx.sections) do
    local inside = false
    for _, r in ipairs(shown) do
      inside = inside or (r.file == s.file and s.line > r.line and s.line <= r.last)
    end
    if not inside and ((s.heading and (names_it(s.heading, q) or
                                       names_it(s.heading, "glimpse." .. q))) or s.lead == q) then
      add(q, s.file, s.line, s.text)
      shown[#shown + 1] = s
    end
  end
  -- 4: nothing exact: the same last name anywhere ("LSTM" finds nn.LSTM; "sum" the manual's
  -- "x:sum(dim, keepdim)")
  if #hits == 0 then
    local want = last_part(q)
    for _, b in ipairs(idx.blocks) do
      for _, n in ipairs(b.names) do
        if last_part(n) == want then add(n, b.where, b.line, b.text) break end
      end
    end
    for _, s in ipairs(idx.sections) do
      if s.lead and last_part(s.lead) == want then add(s.lead, s.file, s.line, s.text) end
    end
  end
  if #hits > 0 then return hits, {} end
  return hits, M.suggest(q)
end

local distance = require("glimpse.check").distance

-- the documented names closest to q: the same words in another order, a typo, a part
function M.suggest(q)
  local idx = build()
  local want = last_part(q):lower()
  local best, seen = {}, {}
  local function consider(n)
    if seen[n] then return end
    seen[n] = true
    local l = last_part(n):lower()
    local d = distance(want, l)
    if l:find(want, 1, true) or want:find(l, 1, true) then d = math.min(d, 1.5) end
    if d <= math.max(2, #want // 3) then best[#best + 1] = {n, d} end
  end
  for _, b in ipairs(idx.blocks) do
    for _, n in ipairs(b.names) do
      if n:find("[%.]") or #n > 2 then consider(n) end
    end
  end
  table.sort(best, function(x, y)
    if x[2] ~= y[2] then return x[2] < y[2] end
    return x[1] < y[1]
  end)
  local out = {}
  for i = 1, math.min(#best, MAX_SUGGESTIONS) do out[i] = best[i][1] end
  return out
end

-- the options spec (glimpse.options) that v carries as v.options, if any; a function can
-- carry none, so a constructor that declares options is a class (a callable table)
local function options_of(v)
  if type(v) ~= "table" and type(v) ~= "userdata" then return nil end
  local ok, spec = pcall(function() return v.options end)
  if not ok or type(spec) ~= "table" then return nil end
  local ok2, lines = pcall(function() return spec.lines end)
  if not ok2 or type(lines) ~= "function" then return nil end
  local ok3, out = pcall(lines, spec)
  return ok3 and type(out) == "table" and out or nil
end

-- the text of v:about() when v has such a method (a captioner says what it knows)
local function about_of(v)
  if type(v) ~= "table" then return nil end
  local ok, f = pcall(function() return v.about end)
  if not ok or type(f) ~= "function" then return nil end
  local ok2, text = pcall(f, v)
  return ok2 and type(text) == "string" and text or nil
end

--- glimpse.repl.doc(name) -> text: what `?name` prints (the documentation and, for a class
-- that declares options, its option table; or "no documentation for name" with close names
-- to try).
function M.doc(name)
  if type(name) == "string" and #name > MAX_NAME then
    return string.format("no documentation for %s... (a name of %d characters)",
                         name:sub(1, 40), #name)
  end
  local hits, suggestions = M.lookup(name)
  local v = type(name) == "string" and normalise(name) ~= "" and resolve(normalise(name))
  local opts = options_of(v)
  local about = about_of(v)
  if #hits == 0 and not opts and not about then
    local msg = "no documentation for " .. tostring(name)
    if type(v) == "function" and debug.getinfo(v, "S").what == "C" then
      msg = msg .. " (a function of the C core: the manual, docs/api/, documents those)"
    end
    if #suggestions > 0 then msg = msg .. "; did you mean: " .. table.concat(suggestions, ", ") end
    return msg
  end
  local parts = {}
  if about then parts[1] = "-- what it knows\n" .. about end
  for i = 1, math.min(#hits, MAX_HITS) do
    local h = hits[i]
    parts[#parts + 1] = "-- " .. h.title .. "   (" .. h.where .. ")\n" .. h.text
  end
  if #hits > MAX_HITS then parts[#parts + 1] = string.format("... (%d more)", #hits - MAX_HITS) end
  if opts then parts[#parts + 1] = table.concat(opts, "\n") end
  return table.concat(parts, "\n\n")
end

--- glimpse.repl.help(name) -- print doc(name); `?name` at the REPL calls it.  With no name,
-- say how to use it.
function M.help(name)
  if name == nil or (type(name) == "string" and #name <= MAX_NAME and normalise(name) == "") then
    print("?name prints the documentation of a function, class or module, e.g. ?nn.LSTM, " ..
          "?glimpse.captioner.pretrained, ?cap:caption")
    return
  end
  print(M.doc(name))
end

return M
