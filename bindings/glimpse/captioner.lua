--- glimpse.captioner -- the public name of the Show, Attend and Tell captioner, which lives
-- in glimpse/models/captioner.lua (see there); the same table as
-- require "glimpse.models.captioner".
return require "glimpse.models.captioner"
