"""The trainer agent: enroll, then each round run H inner steps and commit the outer gradient."""
