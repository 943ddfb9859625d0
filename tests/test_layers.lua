-- tests/test_layers.lua -- the Lua library's layers depend in one direction only.
--
-- Every `require "..."` and every `glimpse.<module>` field read in bindings/glimpse/ and
-- datasets/ is an edge from one module to another.  Layers, lowest first (DESIGN.md):
--   core    glimpse, glimpse.check, glimpse.options, glimpse.util, glimpse.autograd
--   blocks  glimpse.nn, .attention, .optim, .data, .decode, .metrics, .planar, .plot
--   models  glimpse.models
--   lab     glimpse.lab
--   cli     glimpse.cli
--   datasets/  (outside the library: it uses the library, the library reaches it only by
--              name through glimpse.data's registry)
-- An edge to a higher layer fails, and so does a cycle of requires between modules.
local lu = require "luaunit"

local T = {}

local RANK = {core = 0, blocks = 1, models = 2, lab = 3, cli = 4, datasets = 5}
local CORE = {glimpse = true, ["glimpse.core"] = true, ["glimpse.check"] = true,
              ["glimpse.options"] = true, ["glimpse.util"] = true, ["glimpse.autograd"] = true}
local BLOCKS = {nn = true, attention = true, optim = true, data = true, decode = true,
                metrics = true, planar = true, plot = true}

-- the layer of a module name, nil for modules outside glimpse (cjson, argparse, luaunit)
local function layer(mod)
  if CORE[mod] then return "core" end
  local top = mod:match("^glimpse%.([%w_]+)")
  if top then
    if BLOCKS[top] then return "blocks" end
    if top == "models" or top == "lab" or top == "cli" then return top end
    return nil
  end
  if mod:match("^datasets%.") then return "datasets" end
  return nil
end

local function lines_of(cmd)
  local p = assert(io.popen(cmd))
  local out = {}
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  return out
end

local function read(path)
  local f = assert(io.open(path))
  local s = f:read("a")
  f:close()
  return s
end

-- file path -> module name
local function module_of(path)
  local m = path:match("^bindings/(glimpse/.*)%.lua$")
  if m then
    return (m:gsub("/init$", ""):gsub("/", "."))
  end
  m = path:match("^datasets/(.*)%.lua$")
  return m and "datasets." .. m:gsub("/", ".") or nil
end

-- code without comments; strings kept (requires name modules in them)
local function strip_comments(src)
  src = src:gsub("%-%-%[(=*)%[.-%]%1%]", "")
  local out = {}
  for line in (src .. "\n"):gmatch("(.-)\n") do
    -- a "--" outside a string starts a comment (good enough for this code base's style)
    local code, in_str, i = {}, nil, 1
    while i <= #line do
      local ch = line:sub(i, i)
      if in_str then
        if ch == "\\" then code[#code + 1] = line:sub(i, i + 1); i = i + 1
        elseif ch == in_str then in_str = nil; code[#code + 1] = ch
        else code[#code + 1] = ch end
      elseif ch == '"' or ch == "'" then
        in_str = ch; code[#code + 1] = ch
      elseif line:sub(i, i + 1) == "--" then
        break
      else
        code[#code + 1] = ch
      end
      i = i + 1
    end
    out[#out + 1] = table.concat(code)
  end
  return table.concat(out, "\n")
end

-- init.lua's field -> module table, read from its MODULES block
local function lazy_fields()
  local src = read("bindings/glimpse/init.lua")
  local block = src:match("local MODULES = (%b{})")
  local map = {}
  for k, v in block:gmatch("([%w_]+) = \"(glimpse[%w_%.]*)\"") do map[k] = v end
  return map
end

-- every module's edges: {from = mod, to = mod, how = "require" | "field", file =, }
local function edges()
  local files = lines_of("find bindings/glimpse datasets -name '*.lua' | sort")
  local fields = lazy_fields()
  local out, mods = {}, {}
  for _, f in ipairs(files) do
    local from = module_of(f)
    mods[#mods + 1] = from
    -- a single-quoted string is code for another process (a worker's command line), not
    -- an edge of this module
    local code = strip_comments(read(f)):gsub("'[^'\n]*'", "''")
    for to in code:gmatch("require%s*%(?%s*[\"']([%w_%.]+)[\"']") do
      out[#out + 1] = {from = from, to = to, how = "require", file = f}
    end
    -- require("glimpse").data.X and glimpse.X (X a lazily loaded module)
    for to in code:gmatch("[^%w_%.]glimpse%.([%w_]+)") do
      if fields[to] then out[#out + 1] = {from = from, to = fields[to], how = "field", file = f} end
    end
    for to in code:gmatch("require%s*%(%s*\"glimpse\"%s*%)%.([%w_]+)") do
      if fields[to] then out[#out + 1] = {from = from, to = fields[to], how = "field", file = f} end
    end
  end
  return out, mods
end

function T.test_every_dependency_points_down_the_layers()
  local es = edges()
  lu.assertTrue(#es > 100, "found only " .. #es .. " edges: is the scan broken?")
  local bad = {}
  for _, e in ipairs(es) do
    local lf, lt = layer(e.from), layer(e.to)
    -- init.lua is the namespace: it names every module (loaded when a field is first read)
    if e.from ~= "glimpse" and lf and lt and RANK[lt] > RANK[lf] then
      bad[#bad + 1] = string.format("%s (%s) -> %s (%s) by %s in %s", e.from, lf, e.to, lt, e.how,
                                    e.file)
    end
  end
  table.sort(bad)
  lu.assertEquals(bad, {}, "edges against the layers:\n  " .. table.concat(bad, "\n  "))
end

function T.test_no_require_cycles()
  local es, mods = edges()
  local adj = {}
  for _, m in ipairs(mods) do adj[m] = {} end
  for _, e in ipairs(es) do
    -- a package's init.lua gathering its own files is not a cycle with them: only count
    -- requires between modules, and the package -> member edge is the one direction
    if e.how == "require" and adj[e.to] and e.to ~= e.from then adj[e.from][e.to] = true end
  end
  -- Tarjan's strongly connected components
  local index, low, on, stack, n, cycles = {}, {}, {}, {}, 0, {}
  local function visit(v)
    n = n + 1
    index[v], low[v] = n, n
    stack[#stack + 1], on[v] = v, true
    for w in pairs(adj[v]) do
      if not index[w] then
        visit(w)
        low[v] = math.min(low[v], low[w])
      elseif on[w] then
        low[v] = math.min(low[v], index[w])
      end
    end
    if low[v] == index[v] then
      local comp = {}
      repeat
        local w = table.remove(stack)
        on[w] = nil
        comp[#comp + 1] = w
      until w == v
      if #comp > 1 then
        table.sort(comp)
        cycles[#cycles + 1] = table.concat(comp, " <-> ")
      end
    end
  end
  for _, m in ipairs(mods) do if not index[m] then visit(m) end end
  lu.assertEquals(cycles, {}, "require cycles:\n  " .. table.concat(cycles, "\n  "))
end

function T.test_the_library_reaches_datasets_only_through_the_registry()
  local bad = {}
  for _, e in ipairs((edges())) do
    if e.how == "require" and e.to:match("^datasets%.") and layer(e.from) ~= "datasets" then
      bad[#bad + 1] = e.file .. " requires " .. e.to
    end
  end
  lu.assertEquals(bad, {})
end

function T.test_no_package_path_patch_in_the_library()
  local bad = {}
  for _, f in ipairs(lines_of("find bindings/glimpse datasets -name '*.lua' | sort")) do
    local code = strip_comments(read(f))
    if code:find("package%.path%s*=") or code:find("package%.cpath%s*=") then bad[#bad + 1] = f end
  end
  lu.assertEquals(bad, {})
end

function T.test_the_scan_sees_an_edge_against_the_layers()
  -- the scanner itself: a model reading glimpse.train is an upward edge
  lu.assertEquals(layer("glimpse.models.seq2seq"), "models")
  lu.assertEquals(layer("glimpse.lab.train"), "lab")
  lu.assertTrue(RANK[layer("glimpse.lab.train")] > RANK[layer("glimpse.models.seq2seq")])
  local code = strip_comments('local x = glimpse.train -- glimpse.compare\nlocal y = "a--b"')
  lu.assertStrContains(code, "glimpse.train")
  lu.assertNotStrContains(code, "glimpse.compare")
  lu.assertStrContains(code, '"a--b"')
end

-- a file past this is usually two files that have not been separated yet (STYLE.md)
local MAX_LINES = 600

function T.test_no_library_file_is_over_600_lines()
  local long = {}
  for _, f in ipairs(lines_of("find bindings/glimpse datasets -name '*.lua' | sort")) do
    local n = select(2, read(f):gsub("\n", ""))
    if n > MAX_LINES then long[#long + 1] = string.format("%s: %d lines", f, n) end
  end
  lu.assertEquals(long, {})
end

return T
