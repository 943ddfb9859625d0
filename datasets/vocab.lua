-- datasets/vocab.lua -- moved into the library as glimpse.data.vocab (bindings/glimpse/data/vocab.lua);
-- this name is kept for scripts that require it.
return require "glimpse.data.vocab"
