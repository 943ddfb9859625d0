-- tests/test_caption_eval.lua -- what a captioning experiment measures (glimpse.metrics,
-- glimpse.models.caption_eval): BLEU and attention-in-box against hand-computed values, how
-- captions count a scene's items, the choice of decoding on validation, bad metric input.
local lu = require "luaunit"
local glimpse = require "glimpse"
local H = require "tests.captioner_helpers"
local metrics = require "glimpse.metrics"

local tiny, assert_error_matches = H.tiny, H.assert_error_matches
local EXACT, FLOAT_TOL = H.EXACT, H.FLOAT_TOL

local T = {}

-- ---------------------------------------------------------------------------------------
-- BLEU

function T.test_bleu_clips_counts_papineni_example()
  -- Papineni et al.'s example: "the" x7 against "the cat is on the mat": unigram 2/7
  local b = metrics.bleu({"the the the the the the the"},
                         {{"the cat is on the mat", "there is a cat on the mat"}}, {max_n = 1})
  lu.assertAlmostEquals(b.precisions[1], 2 / 7, EXACT)
  lu.assertEquals(b.brevity_penalty, 1)        -- 7 words, closest reference 7 words
  lu.assertAlmostEquals(b[1], 2 / 7, EXACT)
end

function T.test_bleu_hand_value_with_brevity_penalty()
  -- candidate 4 words, references 6 and 9 words: r = 6, BP = exp(1 - 6/4)
  local cand = {"the cat sat down"}
  local refs = {{"the cat sat on the mat", "a cat was sitting down on the mat"}}
  local b = metrics.bleu(cand, refs)
  -- unigrams: the, cat, sat, down all appear in some reference: 4/4
  -- bigrams: "the cat", "cat sat" (ref 1); "sat down" in neither: 2/3
  -- trigrams: "the cat sat" (ref 1); "cat sat down" no: 1/2; 4-grams: none: 0/1
  local bp = math.exp(1 - 6 / 4)
  lu.assertAlmostEquals(b.brevity_penalty, bp, EXACT)
  lu.assertAlmostEquals(b.precisions[2], 2 / 3, EXACT)
  lu.assertAlmostEquals(b[1], bp * 1, EXACT)
  lu.assertAlmostEquals(b[2], bp * math.sqrt(1 * 2 / 3), EXACT)
  lu.assertAlmostEquals(b[3], bp * (1 * 2 / 3 * 1 / 2) ^ (1 / 3), EXACT)
  lu.assertEquals(b[4], 0)
end

function T.test_bleu_is_a_corpus_score_not_a_mean_of_sentence_scores()
  -- counts add up over the corpus before dividing: (3 + 1) / (3 + 2) unigram precision
  local b = metrics.bleu({"a b c", "x y"}, {{"a b c"}, {"x z"}}, {max_n = 1})
  lu.assertAlmostEquals(b.precisions[1], 4 / 5, EXACT)
  lu.assertEquals(b.length, 5)
  lu.assertEquals(b.ref_length, 5)
  lu.assertAlmostEquals(b[1], 4 / 5, EXACT)
  -- a perfect corpus scores 1 at every order
  local p = metrics.bleu({{"a", "b", "c", "d"}}, {{{"a", "b", "c", "d"}}})
  for n = 1, 4 do lu.assertAlmostEquals(p[n], 1, EXACT) end
end

function T.test_bleu_reference_length_prefers_the_shorter_on_a_tie()
  -- a 4-word candidate with references of 3 and 5 words: both 1 away, r = 3, so BP = 1;
  -- with 5 chosen BP would be exp(1 - 5/4)
  local b = metrics.bleu({"a b c d"}, {{"a b c", "a b c d e"}}, {max_n = 1})
  lu.assertEquals(b.ref_length, 3)
  lu.assertEquals(b.brevity_penalty, 1)
end

-- ---------------------------------------------------------------------------------------
-- what captions say about a scene (glimpse.data.scene_text.semantics), caption_eval.scores

-- a bag above a coat, a shirt to the right of the coat (boxes by hand; centres (5.5, 5.5),
-- (5.5, 25.5), (25.5, 25.5))
local function hand_scene()
  local st = glimpse.data.scene_text
  local items = {{word = "bag", box = {1, 1, 10, 10}}, {word = "coat", box = {1, 21, 10, 30}},
                 {word = "shirt", box = {21, 21, 30, 30}}}
  local rng = {int = function() return 2 end}            -- the shirt is related to the coat
  local tokens, word_item, rels = st.caption(items, rng, function(it) return {it.word} end)
  return {items = items, tokens = tokens, word_item = word_item, relations = rels,
          caption = table.concat(tokens, " ")}
end

function T.test_semantics_counts_items_relations_and_exact_scenes_by_hand()
  local st = glimpse.data.scene_text
  local sc = hand_scene()
  lu.assertEquals(sc.caption, "a bag above a coat and a shirt to the right of the coat")
  local caps = {
    "a coat below a bag and a shirt to the right of the coat",  -- a paraphrase: exact
    "a bag above a coat and a shirt to the left of the coat",   -- one relation wrong
    "a bag above a shirt",             -- two items for three; true, but not a pair stated
    "a bag above a coat and a dress below the bag",             -- a dress that is not there
    "bag coat",                                                  -- off the grammar
  }
  local sum, per = st.semantics(caps, {sc, sc, sc, sc, sc})
  lu.assertAlmostEquals(sum.items.precision, 10 / 11, EXACT)
  lu.assertAlmostEquals(sum.items.recall, 10 / 15, EXACT)
  lu.assertAlmostEquals(sum.relations.precision, 5 / 7, EXACT)
  lu.assertAlmostEquals(sum.relations.recall, 4 / 10, EXACT)
  lu.assertAlmostEquals(sum.count, 3 / 5, EXACT)
  lu.assertAlmostEquals(sum.all_named, 2 / 5, EXACT)
  lu.assertAlmostEquals(sum.exact, 1 / 5, EXACT)
  lu.assertAlmostEquals(sum.grammatical, 4 / 5, EXACT)
  lu.assertEquals(sum.by_items, {[3] = {n = 5, count = 3, distinct = 3, all_named = 2, exact = 1}})
  lu.assertEquals(per[1], {named = 3, matched = 3, different = 3, items = 3, triples = 2,
                           true_triples = 2, stated = 2, recalled = 2, count = true,
                           distinct = true, all_named = true, exact = true, grammatical = true})
  lu.assertEquals({per[3].true_triples, per[3].recalled, per[3].exact}, {1, 0, false})
  lu.assertEquals({per[5].named, per[5].grammatical}, {0, false})
  local line = glimpse.models.caption_eval.semantics_line("beam 3", sum)
  lu.assertStrContains(line, "items P 90.9% R 66.7%, relations P 71.4% R 40.0%, right count " ..
                       "60.0% (none twice 60.0%), exact scene 20.0% (grammatical 80.0%)")
  lu.assertStrContains(line, "by items: 3: 3, 3, 2, 1 of 5")
  -- an item named twice makes the count but not three different items
  local twice, per2 = st.semantics({"a bag above a coat and a bag below the coat"}, {sc})
  lu.assertEquals({per2[1].named, per2[1].different, per2[1].count, per2[1].distinct,
                   per2[1].grammatical}, {3, 2, true, false, false})
  lu.assertEquals(twice.by_items[3], {n = 1, count = 1, distinct = 0, all_named = 0, exact = 0})
  H.assert_error_matches({"scene_text.semantics", "2 captions for 1 scenes"}, st.semantics,
                         {"a bag", "a coat"}, {sc})
  H.assert_error_matches({"scene_text.semantics", "caption 1"}, st.semantics, {7}, {sc})
end

function T.test_scores_use_every_reference_and_the_scenes()
  local st = glimpse.data.scene_text
  local sc = hand_scene()
  local refs = st.references(sc)
  lu.assertEquals(#refs, 4)                    -- bag-coat-shirt is a path: 4 orders
  lu.assertEquals(refs[1], sc.caption)
  local set = {n = 2, refs = function() return refs end, scene = function() return sc end}
  local words = {refs[3], "a bag above a coat"}
  local ce = glimpse.models.caption_eval
  local s = ce.scores(set, words)
  local b = metrics.bleu(words, {refs, refs})
  lu.assertEquals(s.bleu, {b[1], b[2], b[3], b[4]})
  lu.assertAlmostEquals(s.cider, (metrics.cider(words, {refs, refs})), EXACT)
  lu.assertAlmostEquals(s.rouge_l, (metrics.rouge_l(words, {refs, refs})), EXACT)
  lu.assertEquals(s.references, 4)
  lu.assertAlmostEquals(s.semantics.exact, 0.5, EXACT)
  lu.assertAlmostEquals(s.rouge_l, (1 + metrics.rouge_l({words[2]}, {refs})) / 2, EXACT)
  lu.assertStrContains(ce.scores_line("greedy", s), "greedy: BLEU-1..4 ")
  -- a set without scenes has no semantics
  lu.assertNil(ce.scores({n = 1, refs = function() return {"a b"} end}, {"a b"}).semantics)
end

-- ---------------------------------------------------------------------------------------
-- attention inside boxes

function T.test_items_counts_the_articles_and_the_named_item_words()
  -- scene 1 holds a bag and a shirt; scene 2 a bag, a coat and a dress
  local function scene(tokens, items)
    local boxes = {}
    for k, w in ipairs(tokens) do
      if w ~= "a" and w ~= "the" and w ~= "and" and w ~= "above" and w ~= "below" then
        boxes[k] = {1, 1, 2, 2}
      end
    end
    return {tokens = tokens, boxes = boxes, items = items}
  end
  local scenes = {scene({"a", "bag", "above", "a", "shirt"}, {1, 2}),
                  scene({"a", "bag", "above", "a", "coat", "and", "a", "dress", "below", "the", "bag"},
                        {1, 2, 3})}
  local set = {n = 2, scene = function(i) return scenes[i] end}
  local ce = glimpse.models.caption_eval
  -- caption 1: two items, one right (bag), one wrong (coat: not in scene 1);
  -- caption 2: two items for three, both right (bag twice: the scene names it twice)
  local r = ce.items(set, {"a bag above a coat", "a bag below a bag"})
  lu.assertAlmostEquals(r.count, 0.5, EXACT)
  lu.assertEquals(r.by_items, {[2] = {right = 1, n = 1}, [3] = {right = 0, n = 1}})
  lu.assertAlmostEquals(r.precision, 3 / 4, EXACT)
  lu.assertStrContains(ce.items_line(r), "the right number in 50.0% of the captions (scenes of 2: 1/1, 3: 0/1 items); 75.0%")
  lu.assertNil(ce.items({n = 1}, {"a bag"}))
end

function T.test_tune_keeps_the_setting_with_the_best_validation_bleu4()
  glimpse.manual_seed(28)
  local ce = glimpse.models.caption_eval
  local cap = tiny({attention = "hard", hard_eval = "argmax"})
  local imgs = glimpse.rand(6, 1, 16, 16)
  local refs = {{"a red circle above a blue square"}, {"a blue square"}, {"a red square below a circle"},
                {"a circle"}, {"a blue circle above a red square"}, {"a square below a red circle"}}
  local set = {n = 6, refs = function(i) return refs[i] end,
               batch = function(idx) return {images = imgs:index_select(1, glimpse.tensor(idx))} end}
  local best, rows = ce.tune(cap, set, {beam = 2, length_penalties = {0, 1, 3}, rules = {"region", "argmax"}})
  lu.assertEquals(#rows, 6)
  local first = rows[1]                                 -- the first row with the highest BLEU-4
  for _, r in ipairs(rows) do if r.bleu4 > first.bleu4 then first = r end end
  lu.assertIs(best, first)
  lu.assertEquals({cap.config.hard_eval, cap.attention.hard_eval, cap.config.length_penalty},
                  {best.rule, best.rule, best.length_penalty})
  -- a row is the BLEU-4 of the beam captions under its setting
  cap:set_hard_eval(rows[5].rule)
  local words = ce.captions(cap, set, 2)
  cap.config.length_penalty = rows[5].length_penalty
  lu.assertAlmostEquals(rows[5].bleu4, ce.bleu(set, (ce.captions(cap, set, 2)))[4], EXACT)
  lu.assertEquals(#words, 6)
  lu.assertStrContains(ce.tune_line(best, rows, 6), "decoding chosen on 6 validation images")
  -- soft attention has one rule: only the length penalty is tried
  local soft = tiny()
  local b2, rows2 = ce.tune(soft, set, {beam = 2, length_penalties = {0, 2}})
  lu.assertEquals(#rows2, 2)
  lu.assertNil(b2.rule)
  local ok, err = pcall(ce.tune, soft, set, {length_penalties = {-1}})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "caption_eval.tune: a length penalty must be a number >= 0, got -1")
  ok, err = pcall(ce.tune, soft, {n = 0})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "caption_eval.tune: set must be a non-empty caption set")
end

function T.test_attention_in_box_whole_cells()
  -- a 2x2 grid on a 4x4 image: box {1,1,2,2} is exactly the top-left cell
  local alphas = glimpse.tensor({{0.7, 0.1, 0.1, 0.1}, {0.1, 0.1, 0.1, 0.7}, {0.25, 0.25, 0.25, 0.25}})
  local boxes = {{1, 1, 2, 2}, {3, 3, 4, 4}, nil}
  local inside, chance = metrics.attention_in_box(alphas, boxes, {2, 2}, {4, 4})
  lu.assertAlmostEquals(inside[1], 0.7, FLOAT_TOL)
  lu.assertAlmostEquals(inside[2], 0.7, FLOAT_TOL)
  lu.assertNil(inside[3])
  lu.assertAlmostEquals(chance[1], 0.25, EXACT)
end

function T.test_attention_in_box_partial_cells_count_by_area()
  -- box {1,1,1,2}: pixel column 1, rows 1-2 = half of the top-left cell (columns 1-2)
  local inside = metrics.attention_in_box({{0.7, 0.1, 0.1, 0.1}}, {{1, 1, 1, 2}}, {2, 2}, {4, 4})
  lu.assertAlmostEquals(inside[1], 0.35, EXACT)
  -- a 3x3 grid on a 4x4 image: cells are 4/3 pixels wide; box {1,1,4,4} covers everything
  local all = metrics.attention_in_box({{0.1, 0.1, 0.1, 0.1, 0.2, 0.1, 0.1, 0.1, 0.1}},
                                       {{1, 1, 4, 4}}, {3, 3}, {4, 4})
  lu.assertAlmostEquals(all[1], 1, EXACT)
  -- box {1,1,2,4}: columns 0..2 of 4: cell column 1 fully (0..4/3), column 2 half (4/3..8/3)
  local left, chance = metrics.attention_in_box({{1, 0, 0, 0, 0, 0, 0, 0, 0},
                                                 {0, 1, 0, 0, 0, 0, 0, 0, 0},
                                                 {0, 0, 1, 0, 0, 0, 0, 0, 0}},
                                                {{1, 1, 2, 4}, {1, 1, 2, 4}, {1, 1, 2, 4}},
                                                {3, 3}, {4, 4})
  lu.assertAlmostEquals(left[1], 1, EXACT)
  lu.assertAlmostEquals(left[2], 0.5, EXACT)
  lu.assertAlmostEquals(left[3], 0, EXACT)
  lu.assertAlmostEquals(chance[1], 0.5, EXACT)     -- half the image
end

function T.test_attention_in_box_normalises_rows()
  local inside = metrics.attention_in_box({{2, 0, 0, 2}}, {{1, 1, 2, 2}}, {2, 2}, {4, 4})
  lu.assertAlmostEquals(inside[1], 0.5, EXACT)
end

-- ---------------------------------------------------------------------------------------
-- bad input

function T.test_bad_metric_inputs_give_clear_errors()
  assert_error_matches("2 candidates but 1 reference", metrics.bleu, {"a", "b"}, {{"a"}})
  assert_error_matches("no references", metrics.bleu, {"a"}, {{}})
  assert_error_matches("alpha row 1 has 3 entries", metrics.attention_in_box, {{1, 0, 0}},
                       {{1, 1, 2, 2}}, {2, 2}, {4, 4})
  assert_error_matches("grid_hw", metrics.attention_in_box, {{1, 0, 0, 0}}, {{1, 1, 2, 2}},
                       {0, 2}, {4, 4})
  assert_error_matches("x2 < x1", metrics.attention_in_box, {{1, 0, 0, 0}}, {{3, 1, 2, 2}},
                       {2, 2}, {4, 4})
end

return T
