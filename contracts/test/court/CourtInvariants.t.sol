// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {InvariantChecks} from "../invariant/InvariantChecks.sol";
import {CourtHandler} from "./CourtHandler.sol";
import {ISynclineMarket} from "../../src/ISynclineMarket.sol";
import {ISynclineCourt} from "../../src/ISynclineCourt.sol";
import {
    TaskState,
    TaskStatus,
    WitnessRecord,
    Challenge,
    ChallengeKind,
    ChallengeStatus
} from "../../src/SynclineTypes.sol";

/// @notice Stateful fuzzing of the market with its court (`CourtHandler`): runs mixed with
/// equivocation proofs, censorship claims and training claims. After every call: the market
/// holds exactly its obligations, slashes never exceed what was posted, witness bonds are either
/// held or slashed, and `openChallenges` counts exactly the open asynchronous challenges.
contract CourtInvariantsTest is InvariantChecks {
    event log_named_uint(string key, uint256 val);

    CourtHandler internal handler;
    ISynclineMarket internal market;
    ISynclineCourt internal court;

    function setUp() public {
        handler = new CourtHandler();
        market = ISynclineMarket(handler.marketAddress());
        court = ISynclineCourt(handler.marketAddress());
    }

    function targetContracts() public view returns (address[] memory targets) {
        targets = new address[](1);
        targets[0] = address(handler);
    }

    function targetSelectors() public view returns (FuzzSelector[] memory targets) {
        bytes4[] memory s = new bytes4[](22);
        s[0] = CourtHandler.commit.selector;
        s[1] = CourtHandler.finalize.selector;
        s[2] = CourtHandler.carryForward.selector;
        s[3] = CourtHandler.warp.selector;
        s[4] = CourtHandler.seal.selector;
        s[5] = CourtHandler.withdraw.selector;
        s[6] = CourtHandler.trainerEquivocation.selector;
        s[7] = CourtHandler.witnessEquivocation.selector;
        s[8] = CourtHandler.challengeCensorship.selector;
        s[9] = CourtHandler.answerCensorship.selector;
        s[10] = CourtHandler.resolveCensorship.selector;
        s[11] = CourtHandler.challengeTraining.selector;
        s[12] = CourtHandler.refereeVote.selector;
        s[13] = CourtHandler.expireChallenge.selector;
        s[14] = CourtHandler.playRound.selector; // whole rounds are the bulk of a real run
        s[15] = CourtHandler.playRound.selector;
        s[16] = CourtHandler.playRound.selector;
        s[17] = CourtHandler.demandAvailability.selector;
        s[18] = CourtHandler.answerAvailability.selector;
        s[19] = CourtHandler.continueInvalidation.selector;
        s[20] = CourtHandler.closeAll.selector;
        s[21] = CourtHandler.answerTraining.selector;
        targets = new FuzzSelector[](1);
        targets[0] = FuzzSelector({addr: address(handler), selectors: s});
    }

    /// balance == sum of escrowOf + sum of credits; each escrow is the sum of its buckets; a
    /// settled task holds nothing.
    function invariant_moneyBalances() public view {
        _checkBalanceEqualsEscrowsPlusCredits(market, handler.allTasks(), handler.allActors());
    }

    /// A trainer never loses more than it staked (only an evicted one loses anything); until
    /// settlement stake + slashed == the stake; stakeHeld is the sum of the stakes.
    function invariant_trainerSlashBounded() public view {
        _checkSlashNeverExceedsStake(market, handler.allTasks());
    }

    /// Once bonded, a witness's bond + slashed == witnessBond until the seal refunds the bond.
    function invariant_witnessBondAccounted() public view {
        uint256[] memory ids = handler.allTasks();
        address[] memory ws = handler.allWitnesses();
        for (uint256 i = 0; i < ids.length; ++i) {
            uint256 bond = market.getSpec(ids[i]).witnessBond;
            bool settled = market.getTaskState(ids[i]).status == TaskStatus.Sealed;
            for (uint256 k = 0; k < ws.length; ++k) {
                WitnessRecord memory w = market.getWitness(ids[i], ws[k]);
                if (!w.bonded) continue;
                vm.assertLe(w.slashed, bond, "slashed <= bond");
                if (!settled) vm.assertEq(uint256(w.bond) + w.slashed, bond, "bond + slashed == witnessBond");
                else vm.assertEq(w.bond, 0, "bond refunded at seal");
            }
        }
    }

    /// openChallenges == the open challenges of the task, all of them asynchronous kinds; the
    /// held bonds are the witness bonds plus the open challenge bonds.
    function invariant_openChallengesCounted() public view {
        uint256[] memory ids = handler.allTasks();
        address[] memory ws = handler.allWitnesses();
        uint256 n = court.challengeCount();
        for (uint256 i = 0; i < ids.length; ++i) {
            uint256 open = 0;
            uint256 openBonds = 0;
            for (uint256 id = 1; id <= n; ++id) {
                Challenge memory c = court.getChallenge(id);
                if (c.taskId != ids[i] || c.status != ChallengeStatus.Open) continue;
                vm.assertTrue(
                    c.kind == ChallengeKind.Censorship || c.kind == ChallengeKind.TrainingFraud,
                    "only asynchronous kinds stay open"
                );
                ++open;
                openBonds += c.bond;
            }
            TaskState memory t = market.getTaskState(ids[i]);
            (, uint32 next, uint32 end) = court.invalidation(ids[i]);
            if (next != end) ++open; // a rollback still being carried out holds the seal too
            vm.assertEq(t.openChallenges, open, "openChallenges == open async challenges + pending rollback");
            uint256 witnessBonds = 0;
            for (uint256 k = 0; k < ws.length; ++k) {
                witnessBonds += market.getWitness(ids[i], ws[k]).bond;
            }
            vm.assertEq(t.bondsHeld, witnessBonds + openBonds, "bondsHeld == witness bonds + open challenge bonds");
        }
    }

    /// The reward weights and earned fees stay the sums of their per-actor parts.
    function invariant_weightsAndFeesConsistent() public view {
        uint256[] memory ids = handler.allTasks();
        address[] memory ws = handler.allWitnesses();
        for (uint256 i = 0; i < ids.length; ++i) {
            TaskState memory t = market.getTaskState(ids[i]);
            address[] memory ts = market.getTrainers(ids[i]);
            uint256 weight = 0;
            for (uint256 k = 0; k < ts.length; ++k) {
                weight += market.getTrainer(ids[i], ts[k]).acceptedWeight;
            }
            vm.assertEq(t.totalWeight, weight, "totalWeight == sum of accepted weights");
            if (t.status == TaskStatus.Sealed) continue;
            uint256 fees = 0;
            for (uint256 k = 0; k < ws.length; ++k) {
                fees += market.getWitness(ids[i], ws[k]).fees;
            }
            vm.assertEq(t.feesEarned, fees, "feesEarned == sum of witness fees");
        }
    }

    /// An honest witness (never equivocates, defends every claim against a round it voted)
    /// never loses its bond.
    function invariant_honestWitnessKeepsBond() public view {
        uint256[] memory ids = handler.allTasks();
        address w = handler.honestWitness();
        for (uint256 i = 0; i < ids.length; ++i) {
            vm.assertEq(market.getWitness(ids[i], w).slashed, 0, "honest witness never slashed");
        }
    }

    /// An honest trainer is never slashed, and every seal credits it at least its stake plus its
    /// recorded reward.
    function invariant_honestTrainerPaid() public view {
        uint256[] memory ids = handler.allTasks();
        address h = handler.honestTrainer();
        for (uint256 i = 0; i < ids.length; ++i) {
            vm.assertEq(market.getTrainer(ids[i], h).slashed, 0, "honest trainer never slashed");
        }
        vm.assertEq(handler.honestTrainerShortfall(), 0, "seal paid the honest trainer stake + reward");
    }

    /// Escrow is never locked: every closing call the handler sent past the deadlines succeeded
    /// within a 30M-gas block, and left no open claim or rollback behind.
    function invariant_escrowNeverLocked() public view {
        vm.assertEq(handler.lockedCalls(), 0, "every open claim and rollback closes within a block");
    }

    /// Not an invariant: a summary of what the campaign exercised (shown with -vv).
    function afterInvariant() public {
        emit log_named_uint("handler calls", handler.calls());
        emit log_named_uint("tasks", handler.allTasks().length);
        emit log_named_uint("challenges", court.challengeCount());
        emit log_named_uint("ok commit", handler.succeeded(CourtHandler.commit.selector));
        emit log_named_uint("ok finalize", handler.succeeded(CourtHandler.finalize.selector));
        emit log_named_uint("ok playRound", handler.succeeded(CourtHandler.playRound.selector));
        emit log_named_uint("ok carryForward", handler.succeeded(CourtHandler.carryForward.selector));
        emit log_named_uint("ok seal", handler.succeeded(CourtHandler.seal.selector));
        emit log_named_uint("ok trainerEquivocation", handler.succeeded(CourtHandler.trainerEquivocation.selector));
        emit log_named_uint("ok witnessEquivocation", handler.succeeded(CourtHandler.witnessEquivocation.selector));
        emit log_named_uint("ok challengeCensorship", handler.succeeded(CourtHandler.challengeCensorship.selector));
        emit log_named_uint("ok answerCensorship", handler.succeeded(CourtHandler.answerCensorship.selector));
        emit log_named_uint("ok resolveCensorship", handler.succeeded(CourtHandler.resolveCensorship.selector));
        emit log_named_uint("ok challengeTraining", handler.succeeded(CourtHandler.challengeTraining.selector));
        emit log_named_uint("ok refereeVote", handler.succeeded(CourtHandler.refereeVote.selector));
        emit log_named_uint("ok expireChallenge", handler.succeeded(CourtHandler.expireChallenge.selector));
        emit log_named_uint("ok demandAvailability", handler.succeeded(CourtHandler.demandAvailability.selector));
        emit log_named_uint("ok answerAvailability", handler.succeeded(CourtHandler.answerAvailability.selector));
        emit log_named_uint("ok continueInvalidation", handler.succeeded(CourtHandler.continueInvalidation.selector));
        emit log_named_uint("ok closeAll", handler.succeeded(CourtHandler.closeAll.selector));
        emit log_named_uint("closing calls", handler.closedByCloseAll());
        emit log_named_uint("honest seals checked", handler.honestSeals());
    }
}
