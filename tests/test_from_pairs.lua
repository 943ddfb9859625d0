-- tests/test_from_pairs.lua -- datasets of one's own pairs (datasets/seq2seq_tasks.lua:
-- glimpse.data.seq2seq.from_pairs and from_file): the generators' dataset class from
-- strings or token lists, characters or words, vocabularies built or given, optional
-- alignments; TSV and JSON-lines files; errors that name the function and the pair or the
-- file and line; and the dataset trains a Seq2Seq through the Trainer and models.eval.
local lu = require "luaunit"
local glimpse = require "glimpse"
local H = require "tests.helpers"
local seq2seq = glimpse.data.seq2seq
local Vocab = glimpse.data.Vocab

local T = {}

local TRAIN_STEPS = 60       -- Trainer steps on the word-reversal pairs ...
local MIN_TOKEN_ACC = 0.5    -- ... after which the validation token accuracy is above this

local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  lu.assertFalse(ok, "expected an error")
  return tostring(e)
end

local function file(name, text)
  local path = H.tmpdir() .. "/" .. name
  H.write_file(path, text)
  return path
end

-- word reversal: "red big cat" -> "cat big red", with its alignment
local WORDS = {"red", "green", "blue", "big", "small", "cat", "dog"}
local function reversal_pairs(n, seed)
  local rng = glimpse.data.Rng.new(seed)
  local out = {}
  for i = 1, n do
    local L = rng:int(2, 5)
    local s, r, a = {}, {}, {}
    for t = 1, L do s[t] = WORDS[rng:int(1, #WORDS)] end
    for t = 1, L do r[t], a[t] = s[L + 1 - t], L + 1 - t end
    out[i] = {table.concat(s, " "), table.concat(r, " "), a}
  end
  return out
end

-- ---------------------------------------------------------------------------------------
-- from_pairs

function T.test_character_pairs_give_the_same_batches_as_the_shipped_generator()
  local ref = seq2seq.reversal{n = 20, min_len = 3, max_len = 8, seed = 3}
  local list = {}
  for i = 1, ref.n do list[i] = {ref.src[i], ref.tgt[i]} end
  local ds = seq2seq.from_pairs(list, {src_vocab = ref.src_vocab, tgt_vocab = ref.tgt_vocab})
  lu.assertEquals(ds.n, ref.n)
  lu.assertEquals(ds.src, ref.src)
  lu.assertEquals(ds.src_ids, ref.src_ids)
  lu.assertEquals(ds.lengths, ref.lengths)
  local a, b = ds:collate({1, 5, 9}), ref:collate({1, 5, 9})
  for _, k in ipairs({"src", "src_mask", "tgt_in", "tgt_out", "tgt_mask"}) do
    lu.assertEquals(a[k]:totable(), b[k]:totable(), k)
  end
  lu.assertEquals(a.src_text, b.src_text)
  lu.assertEquals(a.src_lengths, b.src_lengths)
  lu.assertNil(a.align)
  lu.assertEquals(ds.task, "pairs")
  lu.assertEquals(getmetatable(ds), seq2seq.Seq2Seq)
end

function T.test_pairs_come_as_lists_named_fields_or_token_lists()
  local ds = seq2seq.from_pairs({{"ab", "ba"}, {src = "abc", tgt = "cba"}, {{"x", "y"}, {"y", "x"}}})
  lu.assertEquals(ds.src, {"ab", "abc", "xy"})
  lu.assertEquals(ds.src_tokens[3], {"x", "y"})
  lu.assertEquals(ds:decode_tgt(ds.tgt_ids[2]), "cba")
  lu.assertEquals(ds.separator, "")
end

function T.test_characters_are_utf8_characters()
  local ds = seq2seq.from_pairs({{"héllo", "olléh"}})
  lu.assertEquals(ds.lengths[1], 5)
  lu.assertEquals(ds.src_tokens[1][2], "é")
  lu.assertEquals(ds:decode_src(ds.src_ids[1]), "héllo")
  lu.assertStrContains(err_of(seq2seq.from_pairs, {{"a\xff", "b"}}),
                       "seq2seq.from_pairs: pair 1: the source is not valid UTF-8 (byte 2)")
end

function T.test_words_split_at_whitespace_and_join_with_a_space()
  local ds = seq2seq.from_pairs({{"the  cat sat", "le chat"}, {"a dog", {"un", "chien"}}},
                                {tokens = "words"})
  lu.assertEquals(ds.src_tokens[1], {"the", "cat", "sat"})
  lu.assertEquals(ds.lengths, {3, 2})
  lu.assertEquals(ds.tgt[2], "un chien")
  lu.assertEquals(ds.separator, " ")
  lu.assertEquals(ds:decode_tgt(ds.tgt_ids[1]), "le chat")
  lu.assertEquals(ds:collate({2}).tgt_text, {"un chien"})
end

function T.test_vocabularies_built_shared_or_given()
  local list = {{"aab", "xy"}, {"ab", "yyz"}}
  local ds = seq2seq.from_pairs(list)
  lu.assertEquals(ds.src_vocab:totable(), {"<pad>", "<start>", "<end>", "<unk>", "a", "b"})
  lu.assertEquals(ds.tgt_vocab:token(5), "y")                  -- most frequent first
  local shared = seq2seq.from_pairs(list, {shared_vocab = true})
  lu.assertTrue(shared.src_vocab == shared.tgt_vocab)
  lu.assertEquals(shared.src_vocab:size(), 4 + 5)
  local rare = seq2seq.from_pairs(list, {min_count = 2})
  lu.assertFalse(rare.tgt_vocab:has("z"))
  lu.assertEquals(rare.tgt_ids[2][3], Vocab.UNK)
  local given = seq2seq.from_pairs(list, {src_vocab = {"a"}, tgt_vocab = Vocab.chars("xyz")})
  lu.assertEquals(given.src_ids[1], {5, 5, Vocab.UNK})          -- b is not in it: <unk>
  lu.assertEquals(given.tgt_vocab:token(7), "z")
  local full = seq2seq.from_pairs(list, {src_vocab = given.src_vocab:totable()})
  lu.assertEquals(full.src_vocab:totable(), given.src_vocab:totable())
  lu.assertStrContains(err_of(seq2seq.from_pairs, list, {src_vocab = {"a", "a"}}),
                       "option 'src_vocab' must be a glimpse.data.Vocab or a list of tokens")
  lu.assertStrContains(err_of(seq2seq.from_pairs, list, {shared_vocab = true, src_vocab = {"a"},
                                                         tgt_vocab = {"b"}}),
                       "shared_vocab takes one vocabulary")
end

function T.test_alignments_reach_the_batches_and_survive_split()
  local ds = seq2seq.from_pairs({{"ab", "ba", {2, 1}}, {src = "abc", tgt = "cb", align = {3, 0}}})
  lu.assertEquals(ds.align, {{2, 1}, {3, 0}})
  local b = ds:collate({1, 2})
  lu.assertEquals(b.align:totable(), {{2, 1, 0}, {3, 0, 0}})   -- <end> and padding: 0
  lu.assertEquals(b.align.shape, b.tgt_out.shape)
  local first, rest = ds:split(1)
  lu.assertEquals(first.align, {{2, 1}})
  lu.assertEquals(rest.align, {{3, 0}})
  lu.assertEquals(rest:collate({1}).align:totable(), {{3, 0, 0}})
  lu.assertEquals(rest.src_tokens, {{"a", "b", "c"}})
end

function T.test_bad_pairs_are_named_by_index()
  local cases = {
    {{"ab"}, "pair 1: the target must be a string or a list of tokens, got nil"},
    {{"ab", "ba"}, 7, "pair 2: a pair must be a table"},
    {{"", "x"}, "pair 1: the source is empty"},
    {{{"a", 3}, "x"}, "pair 1: the source token 2 must be a non-empty string, got 3"},
    {{{"a", ""}, "x"}, "pair 1: the source token 2 must be a non-empty string"},
    {{{a = 1}, "x"}, "pair 1: the source must be a list of tokens"},
    {{{"a", "<end>"}, "x"}, "pair 1: the source has the token '<end>', a special"},
    {{"a", {"<pad>"}}, "pair 1: the target has the token '<pad>'"},
    {{"ab", "ba", {2}}, "pair 1: the alignment has 1 entry for 2 target tokens"},
    {{"ab", "ba", {2, 3}}, "pair 1: alignment entry 2 must be a source position in 0..2"},
    {{"ab", "ba", {2, 1.5}}, "pair 1: alignment entry 2 must be a source position in 0..2 (0: none), got 1.5"},
    {{"ab", "ba", "21"}, "pair 1: the alignment must be a list of source positions, got string"},
    {{"ab", "ba", {2, 1}}, {"c", "c"}, "pair 2: has no alignment but pair 1 has one"},
    {{"ab", "ba"}, {"c", "c", {1}}, "pair 2: has an alignment but pair 1 has none"},
  }
  for _, c in ipairs(cases) do
    local want = table.remove(c)
    lu.assertStrContains(err_of(seq2seq.from_pairs, c), "seq2seq.from_pairs: " .. want)
  end
  lu.assertStrContains(err_of(seq2seq.from_pairs, {}), "seq2seq.from_pairs: pairs is empty")
  lu.assertStrContains(err_of(seq2seq.from_pairs, "ab"), "pairs must be a list of {src, tgt}")
  lu.assertStrContains(err_of(seq2seq.from_pairs, {{"a", "b"}}, {token = "words"}),
                       "unknown option 'token' (did you mean 'tokens'?")
  lu.assertStrContains(err_of(seq2seq.from_pairs, {{"a", "b"}}, {tokens = "bytes"}),
                       "unknown tokens 'bytes' (one of chars, words)")
end

function T.test_the_error_points_at_the_callers_line()
  local ok, e = pcall(function() seq2seq.from_pairs({{"", "x"}}) end)
  lu.assertFalse(ok)
  lu.assertStrContains(e, "test_from_pairs.lua:")
end

-- ---------------------------------------------------------------------------------------
-- the dataset in the library's tools

function T.test_a_dataset_of_pairs_trains_a_seq2seq_with_the_trainer()
  local ds = seq2seq.from_pairs(reversal_pairs(200, 1), {tokens = "words", shared_vocab = true,
                                                          name = "word_reversal"})
  local train, valid = ds:split(160)
  glimpse.manual_seed(1)
  local m = glimpse.models.Seq2Seq{dataset = ds, emb = 16, hidden = 32, attn_hidden = 16,
                                   supervise = 0.5}
  lu.assertEquals(m.config.task, "word_reversal")
  local h = glimpse.train.Trainer{model = m, optimizer = {"Adam", lr = 1e-2},
                                  steps = TRAIN_STEPS, data = train, batch_size = 16,
                                  progress = false}:fit()
  lu.assertEquals(h.steps, TRAIN_STEPS)
  local _, stats = m:loss(valid:collate({1, 2, 3}))
  lu.assertNotNil(stats.supervision)                  -- the batches carried align
  local r = glimpse.models.eval.sequence_accuracy(m, valid)
  lu.assertEquals(r.n, 40)
  lu.assertTrue(r.token > MIN_TOKEN_ACC, tostring(r.token))
  -- the batch iterator and the decoder's output through the dataset's vocabulary
  local n = 0
  for b in glimpse.data.batches.iterate(valid, {batch_size = 16, seed = 1}) do n = n + #b.indices end
  lu.assertEquals(n, 40)
  local out = m:decode(valid:collate({1}))[1]
  lu.assertEquals(type(valid:decode_tgt(out)), "string")
end

-- ---------------------------------------------------------------------------------------
-- from_file

function T.test_a_tsv_file_with_and_without_alignments()
  local path = file("data.tsv", "ab\tba\n\nabc\tcba\r\n  \n")
  local ds = seq2seq.from_file(path)
  lu.assertEquals(ds.n, 2)
  lu.assertEquals(ds.tgt, {"ba", "cba"})               -- the \r is not part of the target
  lu.assertEquals(ds.task, "data")
  lu.assertNil(ds.align)
  local al = seq2seq.from_file(file("al.tsv", "ab\tba\t2 1\nabc\tcb\t3  0\n"), {name = "mine"})
  lu.assertEquals(al.align, {{2, 1}, {3, 0}})
  lu.assertEquals(al.task, "mine")
  lu.assertEquals(al:collate({2}).align:totable(), {{3, 0, 0}})
  local w = seq2seq.from_file(file("w.txt", "the cat\tle chat\n"), {tokens = "words"})
  lu.assertEquals(w.tgt_tokens[1], {"le", "chat"})
end

function T.test_a_json_lines_file_with_and_without_alignments()
  local path = file("data.jsonl", '{"src": "ab", "tgt": "ba", "align": [2, 1], "id": 7}\n' ..
                                  '\n{"src": ["a", "b", "c"], "tgt": ["c", "b", "a"], ' ..
                                  '"align": [3, 2, 1]}\n')
  local ds = seq2seq.from_file(path)
  lu.assertEquals(ds.n, 2)
  lu.assertEquals(ds.src, {"ab", "abc"})
  lu.assertEquals(ds.align, {{2, 1}, {3, 2, 1}})
  lu.assertEquals(math.type(ds.align[1][1]), "integer")
  local plain = seq2seq.from_file(file("plain.json", '{"src": "ab", "tgt": "ba", "align": null}\n'))
  lu.assertNil(plain.align)
end

function T.test_the_format_comes_from_the_option_the_extension_or_the_first_line()
  local jl = file("pairs.dat", '{"src": "ab", "tgt": "ba"}\n')
  lu.assertEquals(seq2seq.from_file(jl).tgt, {"ba"})
  local tsv = file("pairs2.dat", "ab\tba\n")
  lu.assertEquals(seq2seq.from_file(tsv).tgt, {"ba"})
  local forced = file("x.jsonl", "ab\tba\n")
  lu.assertEquals(seq2seq.from_file(forced, {format = "tsv"}).tgt, {"ba"})
  lu.assertStrContains(err_of(seq2seq.from_file, forced), "x.jsonl:1: not JSON")
end

function T.test_bad_lines_are_named_by_file_and_line()
  local function e(name, text, opts)
    local path = file(name, text)
    return err_of(seq2seq.from_file, path, opts), path
  end
  local msg, path = e("a.tsv", "ab\tba\nno tab\n")
  lu.assertStrContains(msg, "seq2seq.from_file: " .. path .. ":2: expected src<TAB>tgt or " ..
                            "src<TAB>tgt<TAB>alignment, got 1 field")
  msg = e("b.tsv", "a\tb\tc\td\n")
  lu.assertStrContains(msg, ":1: expected src<TAB>tgt or src<TAB>tgt<TAB>alignment, got 4 fields")
  msg = e("c.tsv", "ab\tba\t2 x\n")
  lu.assertStrContains(msg, ":1: the alignment column must hold integers, got 'x'")
  msg = e("d.tsv", "ab\tba\t2 1\n\nab\tba\t2 9\n")
  lu.assertStrContains(msg, ":3: alignment entry 2 must be a source position in 0..2 (0: none), got 9")
  msg = e("e.tsv", "ab\tba\t2 1\nab\tba\n")
  lu.assertStrContains(msg, ":2: has no alignment but " .. H.tmpdir():match("^(.*)/[^/]*$"))
  msg = e("f.jsonl", '{"src": "ab", "tgt": "ba"}\n{"src": "ab", "tgt": \n')
  lu.assertStrContains(msg, "f.jsonl:2: not JSON")
  msg = e("g.jsonl", '["ab", "ba"]\n')
  lu.assertStrContains(msg, "g.jsonl:1: expected an object")
  msg = e("h.jsonl", '{"src": "ab"}\n')
  lu.assertStrContains(msg, "h.jsonl:1: the object needs \"src\" and \"tgt\"")
  msg = e("i.jsonl", '{"src": "", "tgt": "x"}\n')
  lu.assertStrContains(msg, "i.jsonl:1: the source is empty")
  msg = e("j.tsv", "\n\n")
  lu.assertStrContains(msg, "j.tsv holds no pairs")
  lu.assertStrContains(err_of(seq2seq.from_file, H.tmpdir() .. "/missing.tsv"),
                       "seq2seq.from_file: ")
  lu.assertStrContains(err_of(seq2seq.from_file, H.tmpdir() .. "/missing.tsv"), "missing.tsv")
  lu.assertStrContains(err_of(seq2seq.from_file, 3), "path must be a string")
  lu.assertStrContains(err_of(seq2seq.from_file, path, {format = "csv"}),
                       "unknown format 'csv' (did you mean 'tsv'? one of tsv, jsonl)")
end

return T
