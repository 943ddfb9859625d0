-- tests/test_readme.lua -- the examples of README.md and of the manual in docs/ run.
--
-- Every ```lua block of README.md and of every docs/**/*.md (in sorted path order) runs as a
-- script of its own, in a fresh glimpse process (the executable running this suite), from the
-- repository root; the blocks of one file run PARALLEL at a time.  A block fails when the
-- process exits with an error; the failure names the file, the block's line and its first
-- line.  A block that cannot run on its own (it needs files that are not in the
-- repository, or trains for minutes) starts with a comment line
--   -- (not run by the tests: <reason>)
-- and is skipped; keep those rare.  Blocks in other languages (```sh, plain ```) are text.
local lu = require "luaunit"
local helpers = require "tests.helpers"
local read_file, write_file = helpers.read_file, helpers.write_file

local T = {}

local README = "README.md"
local DOCS = "docs"             -- every *.md below it, recursively
local SKIP_MARK = "^%s*%-%-%s*%(not run by the tests:%s*(.-)%)%s*$"
local BLOCK_TIMEOUT_S = 120     -- one block's wall-clock limit
local MIN_RUN_BLOCKS = 44       -- README.md and docs/ have more; fewer means the parser broke
local PARALLEL = 3              -- blocks of one file running at once
local ERROR_LINES = 12          -- lines of a failing block's output shown in the message

-- ---------------------------------------------------------------------------------------
-- helpers

--- extract_blocks(text) -> array of {line = n, lang = "lua", code = "...", first = "..."}:
--- the fenced code blocks of a Markdown text (``` or ~~~ fences, possibly indented), with
--- n the file's line of the block's first code line and first that line itself.
local function extract_blocks(text)
  local blocks, cur = {}, nil
  local n = 0
  for line in (text .. "\n"):gmatch("(.-)\r?\n") do
    n = n + 1
    if cur then
      local fence = line:match("^%s*([`~][`~][`~]+)%s*$")
      if fence and fence:sub(1, 1) == cur.fence:sub(1, 1) and #fence >= #cur.fence then
        cur.code = table.concat(cur.lines, "\n") .. "\n"
        cur.first = cur.lines[1] or ""
        cur.lines = nil
        blocks[#blocks + 1] = cur
        cur = nil
      else
        cur.lines[#cur.lines + 1] = line
      end
    else
      local fence, info = line:match("^%s*([`~][`~][`~]+)%s*(.-)%s*$")
      if fence and fence:match("^`+$") or (fence and fence:match("^~+$")) then
        cur = {fence = fence, lang = (info:match("^(%S+)") or ""):lower(), line = n + 1,
               lines = {}}
      end
    end
  end
  return blocks
end

--- skip_reason(block) -> the reason when the block is marked as not run, else nil
local function skip_reason(block)
  return block.first:match(SKIP_MARK)
end

local function shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function glimpse_exe()
  return arg and arg[-1] or "build/glimpse"
end

--- start_block(block, tmp) -> a running job: the block as a script in a new glimpse process
local function start_block(block, tmp)
  local path = tmp .. "/block_" .. block.line .. ".lua"
  write_file(path, block.code)
  local cmd = string.format("timeout %d %s %s 2>&1", BLOCK_TIMEOUT_S,
                            shell_quote(glimpse_exe()), shell_quote(path))
  return {pipe = io.popen(cmd), path = path}
end

--- finish_block(job) -> ok, output: waits for the job's process
local function finish_block(job)
  local out = job.pipe:read("a")
  local ok, _, code = job.pipe:close()
  os.remove(job.path)
  if not ok and code == 124 then
    out = out .. "\n(timed out after " .. BLOCK_TIMEOUT_S .. " s)"
  end
  return ok == true, out
end

local function tail_lines(s, n)
  local lines = {}
  for l in (s .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = l end
  while #lines > 0 and lines[#lines] == "" do lines[#lines] = nil end
  local from = math.max(1, #lines - n + 1)
  return table.concat(lines, "\n      ", from)
end

--- check_blocks(blocks, label) -> failures (array of messages), run count, skipped count;
--- the runnable blocks go PARALLEL at a time, and failures come in block order
local function check_blocks(blocks, label)
  local tmp = os.tmpname()
  os.remove(tmp)
  assert(os.execute("mkdir -p " .. shell_quote(tmp)))
  local failures, skipped, runnable = {}, 0, {}
  for _, b in ipairs(blocks) do
    if b.lang == "lua" then
      local reason = skip_reason(b)
      if reason then
        skipped = skipped + 1
        if reason == "" then
          failures[#failures + 1] = string.format("%s:%d: a skipped block must say why: %s",
                                                  label, b.line, b.first)
        end
      else
        runnable[#runnable + 1] = b
      end
    end
  end
  local jobs = {}
  for i, b in ipairs(runnable) do
    jobs[i] = start_block(b, tmp)
    local done = i - PARALLEL + 1            -- keep at most PARALLEL processes running
    if done >= 1 then jobs[done] = {finish_block(jobs[done])} end
  end
  for i = math.max(1, #runnable - PARALLEL + 2), #runnable do
    jobs[i] = {finish_block(jobs[i])}
  end
  for i, b in ipairs(runnable) do
    local ok, out = jobs[i][1], jobs[i][2]
    if not ok then
      failures[#failures + 1] = string.format("%s:%d: the block starting %q failed:\n      %s",
                                              label, b.line, b.first, tail_lines(out, ERROR_LINES))
    end
  end
  os.execute("rm -rf " .. shell_quote(tmp))
  return failures, #runnable, skipped
end

--- doc_files() -> README.md, then every Markdown file under docs/, sorted by path
local function doc_files()
  local files = {README}
  local p = io.popen("find " .. shell_quote(DOCS) .. " -name '*.md' -type f 2>/dev/null")
  local found = {}
  for f in p:lines() do found[#found + 1] = f end
  p:close()
  table.sort(found)
  for _, f in ipairs(found) do files[#files + 1] = f end
  return files
end

-- ---------------------------------------------------------------------------------------
-- the checker itself

function T.test_extractor_finds_fenced_blocks_with_their_lines_and_languages()
  local md = table.concat({
    "# title",                 -- 1
    "```lua",                  -- 2
    "local a = 1",             -- 3
    "print(a)",                -- 4
    "```",                     -- 5
    "text",                    -- 6
    "  ```sh",                 -- 7
    "make test",               -- 8
    "  ```",                   -- 9
    "~~~lua",                  -- 10
    "x = '```'",               -- 11: a fence inside another fence's block is code
    "~~~",                     -- 12
    "```",                     -- 13
    "plain",                   -- 14
    "```",                     -- 15
  }, "\n")
  local b = extract_blocks(md)
  lu.assertEquals(#b, 4)
  lu.assertEquals({b[1].lang, b[1].line, b[1].first, b[1].code}, {"lua", 3, "local a = 1",
                                                                 "local a = 1\nprint(a)\n"})
  lu.assertEquals({b[2].lang, b[2].line, b[2].first}, {"sh", 8, "make test"})
  lu.assertEquals({b[3].lang, b[3].line, b[3].code}, {"lua", 11, "x = '```'\n"})
  lu.assertEquals({b[4].lang, b[4].line, b[4].first}, {"", 14, "plain"})
end

function T.test_skip_marker_needs_its_exact_form_and_a_reason()
  lu.assertEquals(skip_reason({first = "-- (not run by the tests: needs Flickr8k)"}),
                  "needs Flickr8k")
  lu.assertEquals(skip_reason({first = "  --  (not run by the tests: trains for minutes)  "}),
                  "trains for minutes")
  lu.assertNil(skip_reason({first = "-- not run by the tests"}))
  lu.assertNil(skip_reason({first = "local x = 1 -- (not run by the tests: x)"}))
  local failures, ran, skipped = check_blocks(extract_blocks(
    "```lua\n-- (not run by the tests: )\nerror('never run')\n```\n"), "fake.md")
  lu.assertEquals({ran, skipped, #failures}, {0, 1, 1})
  lu.assertStrContains(failures[1], "must say why")
end

function T.test_a_failing_block_is_reported_with_its_line_and_first_line()
  local md = "intro\n\n```lua\nlocal ok = 1\n```\n\n```lua\nlocal t = glimpse.zeros(2, 3)\n"
             .. "print(t:matmul(t))\n```\n"
  local failures, ran = check_blocks(extract_blocks(md), "fake.md")
  lu.assertEquals(ran, 2)
  lu.assertEquals(#failures, 1)
  lu.assertStrContains(failures[1], "fake.md:8:")
  lu.assertStrContains(failures[1], 'local t = glimpse.zeros(2, 3)')
  lu.assertStrContains(failures[1], "inner dims")       -- the engine's message comes along
end

function T.test_blocks_run_in_fresh_processes()
  local md = "```lua\nleaked_global = 42\n```\n"
             .. "```lua\nassert(leaked_global == nil, 'state leaked between blocks')\n```\n"
  local failures, ran = check_blocks(extract_blocks(md), "fake.md")
  lu.assertEquals(ran, 2)
  lu.assertEquals(failures, {})
end

function T.test_blocks_of_one_file_run_concurrently_and_report_in_order()
  local md = {}
  for i = 1, 5 do
    md[#md + 1] = string.format("```lua\nassert(%d %% 2 == 1, 'block %d')\n```\n", i, i)
  end
  local failures, ran = check_blocks(extract_blocks(table.concat(md)), "fake.md")
  lu.assertEquals(ran, 5)
  lu.assertEquals(#failures, 2)
  lu.assertStrContains(failures[1], "fake.md:5:")
  lu.assertStrContains(failures[2], "fake.md:11:")
end

-- ---------------------------------------------------------------------------------------
-- the README and docs/

function T.test_doc_files_are_the_readme_then_docs_in_sorted_order()
  local files = doc_files()
  lu.assertEquals(files[1], README)
  lu.assertTrue(#files > 1, "no Markdown files found under " .. DOCS .. "/")
  for i = 3, #files do lu.assertTrue(files[i - 1] < files[i]) end
end

function T.test_every_lua_example_in_the_readme_and_docs_runs()
  local failures, ran, skipped = {}, 0, 0
  for _, file in ipairs(doc_files()) do
    local f, r, s = check_blocks(extract_blocks(read_file(file)), file)
    for _, msg in ipairs(f) do failures[#failures + 1] = msg end
    ran, skipped = ran + r, skipped + s
  end
  if #failures > 0 then
    lu.fail(string.format("%d of %d examples failed:\n  %s", #failures, ran + skipped,
                          table.concat(failures, "\n  ")))
  end
  lu.assertTrue(ran >= MIN_RUN_BLOCKS, string.format("only %d examples ran", ran))
  lu.assertTrue(skipped <= ran // 4, string.format("%d of %d examples are skipped: keep them "
                                                   .. "rare", skipped, ran + skipped))
end

return T
