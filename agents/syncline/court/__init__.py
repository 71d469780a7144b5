"""The off-chain court: everything that finds, proves, defends and referees a fault.

- :mod:`~syncline.court.findings`: the five provable faults; each builds its own contract call
  (:class:`~syncline.court.findings.ContractCall`), which the challenger agent and the API only send.
- :mod:`~syncline.court.audit`: re-checks one closed round from public data and yields findings.
- :mod:`~syncline.court.proofs`: builds the chunk opening of an aggregation-fraud proof.
- :mod:`~syncline.court.sampling`: how much inner-loop re-execution an auditor spends.
- :mod:`~syncline.court.referee`: re-executes one segment of a trainer's inner loop.
- :mod:`~syncline.court.duty`: a witness refereeing training-fraud claims against its task.
- :mod:`~syncline.court.withheld`: an eager task's checkpoints withheld past the availability
  deadline, claimed once per submission.
- :mod:`~syncline.court.defence`: voters defending censorship claims, trainers answering
  availability demands.

The fault kinds have one name each: :class:`~syncline.protocol.enums.ChallengeKind`, the contract's.
"""
