"""Confidential tasks: attested enclaves (``attestation``) and sealed shards.

A Confidential task admits only trainers and witnesses whose enclave public key and measurement
an attestation report binds (checked on chain by the task's ``IAttestationVerifier``); the
sponsor seals the shards to the admitted keys. See ``docs/attestation.md``.
"""
