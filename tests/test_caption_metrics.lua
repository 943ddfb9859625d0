-- tests/test_caption_metrics.lua -- CIDEr-D and ROUGE-L (glimpse.metrics) against an
-- independent implementation (tests/fixtures/caption_metrics.py, written from coco-caption's
-- definitions; its results in caption_metrics.json), and by hand on small cases.
local lu = require "luaunit"
local glimpse = require "glimpse"
local metrics = require "glimpse.metrics"
local H = require "tests.captioner_helpers"

local assert_error_matches = H.assert_error_matches
local TOL = 1e-6

local T = {}

local CASES = glimpse.util.read_json("tests/fixtures/caption_metrics.json")

function T.test_cider_d_matches_the_independent_implementation()
  lu.assertTrue(#CASES >= 5)
  for _, c in ipairs(CASES) do
    local score, scores = metrics.cider(c.candidates, c.references)
    lu.assertAlmostEquals(score, c.cider, TOL, c.name)
    lu.assertEquals(#scores, #c.cider_scores)
    for i = 1, #scores do lu.assertAlmostEquals(scores[i], c.cider_scores[i], TOL, c.name) end
  end
end

function T.test_rouge_l_matches_the_independent_implementation()
  for _, c in ipairs(CASES) do
    local score, scores = metrics.rouge_l(c.candidates, c.references)
    lu.assertAlmostEquals(score, c.rouge_l, TOL, c.name)
    lu.assertEquals(#scores, #c.rouge_l_scores)
    for i = 1, #scores do
      lu.assertAlmostEquals(scores[i], c.rouge_l_scores[i], TOL, c.name)
    end
  end
end

function T.test_rouge_l_by_hand()
  -- candidate "a b c d" (4), reference "a x c d e" (5): LCS "a c d" = 3; P = 3/4, R = 3/5
  local p, r, b2 = 3 / 4, 3 / 5, 1.2 ^ 2
  local s, per = metrics.rouge_l({"a b c d"}, {{"a x c d e"}})
  lu.assertAlmostEquals(s, (1 + b2) * p * r / (r + b2 * p), 1e-12)
  lu.assertEquals(#per, 1)
  -- the best precision and the best recall may come from different references
  s = metrics.rouge_l({"a b"}, {{"a b c d e f", "a"}})      -- P = 1 (ref 1), R = 1 (ref 2)
  lu.assertAlmostEquals(s, 1, 1e-12)
  lu.assertEquals(metrics.rouge_l({""}, {{"a b"}}), 0)
  lu.assertEquals(metrics.rouge_l({}, {}), 0)
  -- ids work as tokens
  lu.assertAlmostEquals(metrics.rouge_l({{4, 5, 6}}, {{{4, 5, 6}}}), 1, 1e-12)
end

function T.test_cider_d_by_hand_and_its_shape()
  -- two images, one reference each, candidates equal to their references: every n-gram
  -- of one image is absent from the other's, so idf = log 2 everywhere and each cosine is 1
  local s, per = metrics.cider({"a b c d", "e f g h"}, {{"a b c d"}, {"e f g h"}})
  lu.assertAlmostEquals(s, 10, 1e-12)
  lu.assertAlmostEquals(per[1], 10, 1e-12)
  -- a paraphrase listed as a reference is no error any more
  local one = metrics.cider({"a trouser below a sandal", "a bag"},
                            {{"a sandal above a trouser"}, {"a bag"}})
  local both = metrics.cider({"a trouser below a sandal", "a bag"},
                             {{"a sandal above a trouser", "a trouser below a sandal"}, {"a bag"}})
  lu.assertTrue(both > one)
  -- the Gaussian length penalty: the same words one bigram longer cost exp(-1/72) at n = 1
  local s1 = metrics.cider({"a b", "x y"}, {{"a b"}, {"x y"}}, {max_n = 1})
  lu.assertAlmostEquals(s1, 10, 1e-12)
  local s2 = metrics.cider({"a b b", "x y"}, {{"a b"}, {"x y"}}, {max_n = 1})
  -- candidate 1: weights a: w, b: 2w; reference a: w, b: w; clipped dot = 2 w^2, norms
  -- sqrt(5) w and sqrt(2) w; penalty exp(-1 / 72)
  lu.assertAlmostEquals(s2, (10 * 2 / math.sqrt(10) * math.exp(-1 / 72) + 10) / 2, 1e-12)
  -- one image alone: every n-gram is in every reference set, idf 0, score 0
  lu.assertEquals(metrics.cider({"a b"}, {{"a b"}}), 0)
  lu.assertEquals(metrics.cider({}, {}), 0)
end

function T.test_bad_inputs_name_the_function()
  assert_error_matches({"metrics.cider", "2 candidates but 1"}, metrics.cider, {"a", "b"}, {{"a"}})
  assert_error_matches({"metrics.cider", "candidate 1 has no references"}, metrics.cider,
                       {"a"}, {{}})
  assert_error_matches({"metrics.cider", "sigma"}, metrics.cider, {"a"}, {{"a"}}, {sigma = 0})
  assert_error_matches({"metrics.rouge_l", "candidate 1"}, metrics.rouge_l, {true}, {{"a"}})
  assert_error_matches({"metrics.rouge_l", "beta"}, metrics.rouge_l, {"a"}, {{"a"}}, {beta = -1})
  assert_error_matches({"metrics.rouge_l", "argument #1"}, metrics.rouge_l, "a", {{"a"}})
end

return T
