-- datasets/rng.lua -- moved into the library as glimpse.data.rng (bindings/glimpse/data/rng.lua);
-- this name is kept for scripts that require it.
return require "glimpse.data.rng"
