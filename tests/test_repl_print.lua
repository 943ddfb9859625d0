-- tests/test_repl_print.lua -- what the REPL prints (bindings/glimpse/cli/repl.lua: pretty,
-- show) and its `?name` help (bindings/glimpse/cli/help.lua).
--
-- pretty and the help lookup are checked in this process; the REPL itself is driven as in
-- test_repl.lua: `<exe> -i /dev/null` with lines on a pipe (arg[-1] names the executable).
local lu = require "luaunit"
local glimpse = require "glimpse"
local repl = glimpse.repl
local help = require "glimpse.cli.help"

local T = {}

local H = require "tests.helpers"
local sh_quote, tmpdir, read_file, write_file = H.sh_quote, H.tmpdir, H.read_file, H.write_file

local EXE = arg and arg[-1]
local LONG_NAME_S = 1   -- CPU seconds a 100,000-character `?name` may take

-- the REPL fed `input` through a pipe: stdout, stderr (the banner line removed)
local function repl_run(input)
  local d = tmpdir()
  write_file(d .. "/in", input)
  os.execute(string.format("%s -i /dev/null < %s > %s 2> %s", sh_quote(EXE), sh_quote(d .. "/in"),
                           sh_quote(d .. "/out"), sh_quote(d .. "/err")))
  local out, err = read_file(d .. "/out"), read_file(d .. "/err")
  os.execute("rm -rf " .. sh_quote(d))
  return (out:gsub("^glimpse[^\n]*\n", "")), err
end

-- ---------------------------------------------------------------------------------------
-- pretty

function T.test_a_short_array_of_numbers_is_one_line()
  lu.assertEquals(repl.pretty({8, 64}), "{8, 64}")
  lu.assertEquals(repl.pretty(glimpse.zeros(8, 64).shape), "{8, 64}")
  lu.assertEquals(repl.pretty({}), "{}")
  lu.assertEquals(repl.pretty({1.5, 2.0, -3}), "{1.5, 2.0, -3}")
end

function T.test_keys_array_part_first_then_sorted_by_type_then_value()
  local t = {"x", "y", b = 2, a = 1, [10] = "ten", [2.5] = "f", [true] = "t", ["not name"] = 0,
             ["end"] = 5}
  lu.assertEquals(repl.pretty(t, {width = 200}),
                  '{"x", "y", [2.5] = "f", [10] = "ten", a = 1, b = 2, ["end"] = 5, ' ..
                  '["not name"] = 0, [true] = "t"}')
end

function T.test_strings_are_quoted_with_escapes()
  lu.assertEquals(repl.pretty({'say "hi"\n', "tab\there", "\1"}),
                  '{"say \\"hi\\"\\n", "tab\\there", "\\1"}')
end

function T.test_a_wide_table_breaks_into_indented_lines()
  local t = {name = string.rep("n", 30), inner = {alpha = string.rep("a", 30), beta = {1, 2}}}
  lu.assertEquals(repl.pretty(t, {width = 60}),
                  "{\n" ..
                  "  inner = {\n" ..
                  '    alpha = "' .. string.rep("a", 30) .. '",\n' ..
                  "    beta = {1, 2}\n" ..
                  "  },\n" ..
                  '  name = "' .. string.rep("n", 30) .. '"\n' ..
                  "}")
end

function T.test_depth_limit_counts_what_it_hides()
  local t = {a = {b = {c = {d = 1}, e = {1, 2, 3}}}}
  lu.assertEquals(repl.pretty(t, {depth = 2}), "{a = {b = {... 2 entries}}}")
  lu.assertEquals(repl.pretty(t, {depth = 3}), "{a = {b = {c = {... 1 entry}, e = {... 3 entries}}}}")
end

function T.test_length_limit_shows_the_first_items_and_counts_the_rest()
  local t = {}
  for i = 1, 30 do t[i] = i end
  lu.assertEquals(repl.pretty(t, {items = 5}), "{1, 2, 3, 4, 5, ... (25 more)}")
  local big = {}
  for i = 1, 200 do big[i] = i end
  lu.assertStrContains(repl.pretty(big), "... (150 more)")
end

function T.test_cycles_are_marked_and_shared_tables_print_twice()
  local t = {name = "root"}
  t.self = t
  local s = repl.pretty(t)
  lu.assertStrMatches(s, '{name = "root", self = <cycle: table: 0x%x+>}')
  local shared = {1}
  lu.assertEquals(repl.pretty({shared, shared}), "{{1}, {1}}")
end

function T.test_tensors_show_their_summary_and_modules_their_name_inside_tables()
  local lin = glimpse.nn.Linear(4, 3)
  local seq = glimpse.nn.Sequential{glimpse.nn.Linear(2, 2), glimpse.nn.ReLU()}
  local s = repl.pretty({x = glimpse.zeros(2, 3), w = lin.weight, m = seq, l = lin,
                         s = glimpse.tensor(1.5)}, {width = 200})
  lu.assertStrContains(s, "x = [glimpse.Tensor of size 2x3]")
  lu.assertStrContains(s, "w = [glimpse.Tensor of size 3x4, requires grad]")
  lu.assertStrContains(s, "s = [glimpse.Tensor of size ()]")
  lu.assertStrContains(s, "l = Linear(in_features=4, out_features=3, bias=true)")
  lu.assertStrContains(s, "m = Sequential")
  lu.assertNotStrContains(s, "ReLU")         -- a module inside a table is one name, not its tree
  lu.assertNotStrContains(s, "0.")           -- no tensor data
end

function T.test_objects_with_tostring_print_through_it()
  local obj = setmetatable({}, {__tostring = function() return "<my object>" end})
  lu.assertEquals(repl.pretty({obj}), "{<my object>}")
end

function T.test_bad_options_are_errors_naming_them()
  local ok, err = pcall(repl.pretty, {}, {depth = 0})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "repl.pretty: opts.depth must be a positive integer, got 0")
  ok, err = pcall(repl.pretty, {}, 5)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "repl.pretty: opts must be a table")
end

-- ---------------------------------------------------------------------------------------
-- the REPL's auto-print

function T.test_repl_prints_a_shape_as_a_short_list()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local out = repl_run("x = glimpse.zeros(8, 64)\nx.shape\n")
  lu.assertEquals(out, "{8, 64}\n")
end

function T.test_repl_prints_tables_by_contents_but_print_stays_luas()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local out = repl_run("{b = 2, a = {1, 'x'}}\nprint({})\n" ..
                       "{w = glimpse.zeros(2), n = glimpse.nn.Linear(1, 1), s = 'x'}\n")
  local want = "{a = {1, \"x\"}, b = 2}\n"
  lu.assertEquals(out:sub(1, #want), want)
  lu.assertStrMatches(out:sub(#want + 1), "table: 0x%x+\n.*")
  -- wider than 80 columns: one entry per line
  lu.assertStrContains(out, "{\n  n = Linear(in_features=1, out_features=1, bias=true),\n" ..
                            '  s = "x",\n  w = [glimpse.Tensor of size 2]\n}\n')
end

function T.test_repl_prints_several_values_with_tabs_and_tensors_in_full()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local out = repl_run("return {1, 2}, 'a', nil\nglimpse.ones(2)\nglimpse.nn.Linear(2, 2)\n")
  lu.assertStrContains(out, "{1, 2}\ta\tnil\n")
  lu.assertStrContains(out, tostring(glimpse.ones(2)))
  lu.assertStrContains(out, tostring(glimpse.nn.Linear(2, 2)))
end

-- ---------------------------------------------------------------------------------------
-- ?name

function T.test_question_mark_prints_a_class_doc_from_its_comment()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local out, err = repl_run("?glimpse.nn.LSTM\n?nn.LSTM\nprint('after')\n")
  lu.assertEquals(err, "")
  local _, n = out:gsub("nn%.LSTM%(din, hidden, {layers=1", "")
  lu.assertTrue(n >= 2, out)      -- once per question (the manual may add its own section)
  lu.assertStrContains(out, "nn/rnn.lua:")
  lu.assertStrContains(out, "after\n")
end

function T.test_question_mark_finds_methods_and_functions()
  local d = repl.doc("cap:caption")
  lu.assertStrContains(d, "cap:caption(image or images")
  lu.assertStrContains(repl.doc("Captioner.caption"), "cap:caption(image or images")
  lu.assertStrContains(repl.doc("glimpse.captioner.pretrained"), "a shipped model by")
  lu.assertStrContains(repl.doc("attention.masked_softmax"), "alpha (...,L)")
  lu.assertStrContains(repl.doc("glimpse.repl.pretty"), "depth=4, width=80")
  -- a module: its file's header
  lu.assertStrContains(repl.doc("glimpse.captioner"), "Show, Attend and Tell")
end

function T.test_unknown_names_say_so_and_suggest_close_ones()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local out = repl_run("?LSTMcel\n?zzzqqq\n")
  lu.assertStrContains(out, "no documentation for LSTMcel; did you mean: nn.LSTMCell")
  lu.assertStrContains(out, "no documentation for zzzqqq\n")
  local _, sugg = repl.lookup("masked_softmx")
  lu.assertEquals(sugg[1], "attention.masked_softmax")
  lu.assertStrContains(repl.doc(" "), "no documentation")
  lu.assertError(repl.lookup, 5)
  -- a C function without a comment (and no manual): said so
  local empty, saved = tmpdir(), help.docs_dir
  help.docs_dir = empty
  help.reset()
  local zeros = repl.doc("glimpse.zeros")
  help.docs_dir = saved
  help.reset()
  os.execute("rm -rf " .. sh_quote(empty))
  lu.assertStrContains(zeros, "a function of the C core")
end

function T.test_the_manual_is_a_second_source()
  local d = tmpdir()
  write_file(d .. "/ops.md", table.concat({
    "# glimpse ops", "", "## glimpse.softmax(x, dim)", "",
    "The softmax along dim: exp(x) / sum exp(x).", "",
    "```lua", "local y = glimpse.softmax(x, 2)", "```", "",
    "glimpse.softmax(x) -- dim defaults to the last.", "", "softmax is also a word.", "",
    "## glimpse.relu(x)", "", "max(x, 0).", "",
    "glimpse.gelu(x) -- the Gaussian error linear unit,", "tanh approximation.", ""}, "\n"))
  local saved = help.docs_dir
  help.docs_dir = d
  help.reset()
  local soft, sec, gelu, cap = repl.doc("softmax"), repl.doc("glimpse.relu"), repl.doc("gelu"),
                               repl.doc("cap:caption")
  help.docs_dir = saved
  help.reset()
  os.execute("rm -rf " .. sh_quote(d))
  lu.assertStrContains(soft, "docs/api/ops.md:3")
  lu.assertStrContains(soft, "The softmax along dim")
  lu.assertStrContains(soft, "local y = glimpse.softmax(x, 2)")
  lu.assertNotStrContains(soft, "max(x, 0)")          -- the section ends at the next heading
  lu.assertStrContains(soft, "dim defaults to the last")
  local _, hits = soft:gsub("docs/api/ops%.md", "")
  lu.assertEquals(hits, 1)                            -- its paragraphs are not shown again
  lu.assertStrContains(sec, "max(x, 0).")
  lu.assertStrContains(gelu, "tanh approximation.")
  lu.assertStrContains(cap, "cap:caption(image")       -- the comments are still read
end

function T.test_question_mark_reads_the_datasets_folder()
  for _, q in ipairs({"seq2seq.from_pairs", "data.seq2seq.from_pairs",
                      "glimpse.data.seq2seq.from_pairs"}) do
    local d = repl.doc(q)
    lu.assertStrContains(d, "datasets/seq2seq_tasks.lua:")
    lu.assertStrContains(d, "seq2seq.from_pairs(pairs, {tokens=\"chars\"")
  end
  lu.assertStrContains(repl.doc("seq2seq.from_file"), "format \"tsv\"")
  lu.assertStrContains(repl.doc("tasks.dataset"), "tasks.dataset(task, src, tgt, src_vocab")
  lu.assertStrContains(repl.doc("data.seq2seq.reversal"), "digit strings and their reversals")
  -- compare_tasks.lua names itself glimpse.data.compare on its first line
  lu.assertStrContains(repl.doc("data.compare.task"), "datasets/compare_tasks.lua:")
  -- the comment once (found by value and by name), then the manual's section
  local hits = repl.lookup("data.seq2seq.from_pairs")
  lu.assertStrContains(hits[1].where, "datasets/seq2seq_tasks.lua:")
  lu.assertEquals(#hits, 2)
  lu.assertStrContains(hits[2].where, "docs/api/data.md:")
end

function T.test_question_mark_reads_an_installed_datasets_folder_once()
  -- `make install` puts datasets/ inside the library's folder
  local lib = tmpdir()
  os.execute("mkdir -p " .. sh_quote(lib .. "/datasets"))
  write_file(lib .. "/thing.lua", "--- thing.go(x) -> y: goes\nfunction M.go(x) end\n")
  write_file(lib .. "/datasets/my_tasks.lua", table.concat({
    "--- datasets/my_tasks.lua (glimpse.data.mine) -- tasks of mine", "local M = {}", "",
    "--- tasks.make_one(n) -> a dataset of n examples", "function M.make_one(n) end", "",
    "return M", ""}, "\n"))
  write_file(lib .. "/datasets/plain.lua", "--- plain.build() -> built\nfunction M.build() end\n")
  local saved_lib, saved_docs = help.library_dir, help.docs_dir
  help.library_dir, help.docs_dir = lib, lib .. "/no-docs"
  help.reset()
  local one, two, three = repl.doc("mine.make_one"), repl.doc("data.mine.make_one"),
                          repl.doc("plain.build")
  local hits = repl.lookup("tasks.make_one")
  local go = repl.doc("thing.go")
  help.library_dir, help.docs_dir = saved_lib, saved_docs
  help.reset()
  lu.assertStrContains(one, "datasets/my_tasks.lua:4")
  lu.assertStrContains(one, "a dataset of n examples")
  lu.assertStrContains(two, "datasets/my_tasks.lua:4")
  lu.assertStrContains(three, "datasets/plain.lua:1")     -- no (glimpse.data.X): the file's name
  lu.assertEquals(#hits, 1)
  lu.assertStrContains(go, "bindings/glimpse/thing.lua:1")
end

function T.test_question_mark_answers_the_c_core_from_the_manual_signatures()
  local cases = {
    softmax = "glimpse.softmax(x, dim=-1, mask)",
    ["glimpse.softmax"] = "glimpse.softmax(x, dim=-1, mask)",
    matmul = "glimpse.matmul(a, b, transpose_a=false, transpose_b=false)",
    cross_entropy = "glimpse.cross_entropy(logits (...,C), targets (...)",
    log_softmax = "glimpse.log_softmax(x, dim=-1)",
    ["x:sum"] = "x:sum(dim, keepdim=false)",
    argmax = "x:argmax(dim, keepdim=false)",
    cat = "glimpse.cat(list, dim=1)",
  }
  for q, want in pairs(cases) do
    local d = repl.doc(q)
    lu.assertTrue(d:find("docs/api/tensor.md:", 1, true) ~= nil and d:find(want, 1, true) ~= nil,
                  q .. ": " .. d)
  end
end

-- a class carrying a glimpse.options spec, as the library's constructors do
local function options_class(owner)
  local spec = glimpse.options.declare(owner, {
    {"width", "int", 8, range = {1}, help = "how wide the layer is"},
    {"mode", "string", "soft", choices = {"soft", "hard"}, help = "which attention"},
  })
  return setmetatable({options = spec}, {__call = function() return {} end})
end

function T.test_question_mark_lists_the_options_a_class_declares()
  _help_Thing = options_class("Thing")
  local d = repl.doc("_help_Thing")
  _help_Thing = nil
  lu.assertStrContains(d, "Thing options:")
  lu.assertStrMatches(d, ".*width%s+int[^\n]*8%s+how wide the layer is.*")
  lu.assertStrMatches(d, ".*mode%s+soft|hard%s+\"soft\"%s+which attention.*")
  -- a table whose `options` is no spec lists nothing
  _help_plain = {options = {width = 8}}
  local plain = repl.doc("_help_plain")
  _help_plain = nil
  lu.assertStrContains(plain, "no documentation for _help_plain")
end

function T.test_question_mark_at_the_repl_prints_documentation_and_options_together()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local out, err = repl_run("Linear = glimpse.nn.Linear\n" ..
    "Linear.options = glimpse.options.declare('nn.Linear', {{'bias', 'boolean', true, " ..
    "help = 'add a bias'}})\n?nn.Linear\n")
  lu.assertEquals(err, "")
  lu.assertStrContains(out, "nn.Linear(din, dout")        -- the doc comment
  lu.assertStrContains(out, "nn.Linear options:")          -- then the option table
  lu.assertStrMatches(out, ".*bias%s+boolean%s+true%s+add a bias.*")
end

function T.test_every_shipped_class_with_options_lists_them()
  local owners = {}
  local function visit(tbl, depth)
    if depth > 2 or type(tbl) ~= "table" then return end
    for name, v in pairs(tbl) do
      if type(name) == "string" and type(v) == "table" then
        local spec = rawget(v, "options")
        if type(spec) == "table" and type(spec.lines) == "function" then
          owners[#owners + 1] = {name, v, spec.owner}
        elseif depth < 2 and not name:match("^_") then
          visit(v, depth + 1)
        end
      end
    end
  end
  for _, m in ipairs({glimpse.nn, glimpse.models, glimpse.optim, glimpse.train}) do visit(m, 1) end
  for _, o in ipairs(owners) do
    _help_shipped = o[2]
    local d = repl.doc("_help_shipped")
    _help_shipped = nil
    lu.assertStrContains(d, o[3] .. " options:", o[1])
  end
end

function T.test_a_name_of_100000_characters_is_answered_at_once()
  local start = os.clock()
  local long = repl.doc(string.rep("a", 100000))
  local dots = repl.lookup(string.rep("a.", 50000))
  local blanks = repl.doc(string.rep(" ", 99999) .. "x")
  local spent = os.clock() - start
  lu.assertStrContains(long, "no documentation for aaaa")
  lu.assertStrContains(long, "(a name of 100000 characters)")
  lu.assertEquals(dots, {})
  lu.assertStrContains(blanks, "no documentation")
  lu.assertTrue(spent < LONG_NAME_S, string.format("%.1f s", spent))
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local out = repl_run("?" .. string.rep("a", 100000) .. "\nprint('after')\n")
  lu.assertStrContains(out, "(a name of 100000 characters)\nafter\n")
end

function T.test_question_mark_alone_says_how_to_use_it()
  lu.skipIf(not EXE, "needs the glimpse executable as arg[-1]")
  local out = repl_run("?\n")
  lu.assertStrContains(out, "?name prints the documentation")
end

return T
