"""Op groups: each sub-package lists its ops in ``DECLARATIONS``. Plain modules here (token_inputs) are helpers the groups share."""
