"""Step caches (--cache): steps that skip DiT work, as diffusers' cache hooks decide them."""
