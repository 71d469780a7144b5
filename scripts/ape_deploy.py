"""Deploy Syncline with Ape: ``ape run ape_deploy --network ethereum:local:foundry``.

Deploys ``SynclineCourt`` then ``SynclineMarket(court)`` from Ape's first test account on the
anvil that ape-foundry starts, and checks the new market answers a view. Run by
``scripts/ape_check.sh``; it needs Ape's own virtual environment (``.venv-ape``), not the project's.
"""

from ape import accounts, project


def main() -> None:
    deployer = accounts.test_accounts[0]
    court = deployer.deploy(project.SynclineCourt)
    market = deployer.deploy(project.SynclineMarket, court.address)
    count = market.taskCount()
    if count != 0:
        raise SystemExit(f"a fresh market reports taskCount() = {count}")
    print(f"ape deployed SynclineCourt at {court.address} and SynclineMarket at {market.address}")
