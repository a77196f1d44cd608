"""Swallow / FVDF: coflow scheduling with traffic compression, reproduced against Varys SEBF on the Facebook trace."""
