// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "../base/Vm.sol";

import {InvariantChecks} from "./InvariantChecks.sol";
import {MarketHandler} from "./MarketHandler.sol";
import {SynclineMarket} from "../../src/SynclineMarket.sol";
import {TaskSpec, TaskState, TaskStatus, TrainerRecord, WitnessRecord} from "../../src/SynclineTypes.sol";

/// @notice Stateful fuzzing of the market through `MarketHandler`.
contract MarketInvariantsTest is InvariantChecks {
    SynclineMarket internal market;
    MarketHandler internal handler;

    function setUp() public {
        warpTo(1_700_000_000);
        address court = vm.deployCode("SynclineCourt.sol:SynclineCourt");
        market = SynclineMarket(payable(vm.deployCode("SynclineMarket.sol:SynclineMarket", abi.encode(court))));
        handler = new MarketHandler(market);
        vm.label(address(handler), "MarketHandler");
    }

    function targetContracts() public view returns (address[] memory targets) {
        targets = new address[](1);
        targets[0] = address(handler);
    }

    function targetSelectors() public view returns (FuzzSelector[] memory targets) {
        bytes4[] memory selectors = new bytes4[](11);
        selectors[0] = MarketHandler.postTask.selector;
        selectors[1] = MarketHandler.enroll.selector;
        selectors[2] = MarketHandler.startRun.selector;
        selectors[3] = MarketHandler.cancelUnderfilled.selector;
        selectors[4] = MarketHandler.commit.selector;
        selectors[5] = MarketHandler.vote.selector;
        selectors[6] = MarketHandler.carryForward.selector;
        selectors[7] = MarketHandler.seal.selector;
        selectors[8] = MarketHandler.withdraw.selector;
        selectors[9] = MarketHandler.warp.selector;
        selectors[10] = MarketHandler.bondWitness.selector;
        targets = new FuzzSelector[](1);
        targets[0] = FuzzSelector({addr: address(handler), selectors: selectors});
    }

    /// (a) The market holds exactly what it owes: task escrows (reward pool, fee budget, earned
    /// fees, stakes and bonds) plus withdrawable credits.
    function invariant_balanceEqualsEscrowsPlusCredits() public view virtual {
        _checkBalanceEqualsEscrowsPlusCredits(market, handler.tasks(), handler.actors());
    }

    /// (b) A round finalizes at most once and its result never changes.
    function invariant_finalizedResultNeverChanges() public view virtual {
        vm.assertEq(handler.ghostRefinalized(), 0, "a round emitted RoundFinalized twice");
        vm.assertEq(handler.ghostResultChanged(), 0, "a finalized result changed (or appeared without an event)");
        vm.assertEq(handler.ghostConflictAccepted(), 0, "a conflicting finalize was accepted");
        vm.assertEq(handler.ghostIdempotenceBroken(), 0, "an idempotent re-finalize changed state or logged");
        uint256[] memory ids = handler.tasks();
        for (uint256 i = 0; i < ids.length; ++i) {
            uint32 rounds = market.getSpec(ids[i]).rounds;
            for (uint32 r = 0; r < rounds; ++r) {
                bytes32 g = handler.ghostFinal(ids[i], r);
                if (g != bytes32(0)) vm.assertEq(market.getRound(ids[i], r).result, g, "stored result = first result");
            }
        }
    }

    /// (c) No credit is withdrawn twice: withdrawn == credited - still credited, in sum and per account.
    function invariant_noCreditWithdrawnTwice() public view virtual {
        address[] memory actors = handler.actors();
        uint256 outstanding;
        for (uint256 i = 0; i < actors.length; ++i) {
            uint256 credit = market.creditOf(actors[i]);
            outstanding += credit;
            vm.assertEq(
                handler.withdrawnOf(actors[i]),
                handler.creditedOf(actors[i]) - credit,
                "per account: withdrawn == credited - credit"
            );
        }
        vm.assertEq(handler.ghostWithdrawn(), handler.ghostCredited() - outstanding, "withdrawn == credited - credits");
        vm.assertEq(handler.ghostBadWithdraw(), 0, "a withdrawal paid something other than the credit");
    }

    /// (d) A slash never exceeds a stake: slashed + stake == trainerStake until the task settles;
    /// the task's stakeHeld is the sum of its trainers' stakes.
    function invariant_slashNeverExceedsStake() public view virtual {
        _checkSlashNeverExceedsStake(market, handler.tasks());
    }

    /// (e) A witness bond is posted once, at the spec's amount, and never grows or leaks: once
    /// bonded, slashed + bond (+ what was refunded at settlement) == witnessBond; a settled task
    /// holds no bond; the task's bondsHeld is the sum of its witnesses' bonds (no challenge open).
    function invariant_witnessBondsConserved() public view virtual {
        vm.assertEq(handler.ghostBadBond(), 0, "a bond was taken twice or at a wrong amount");
        uint256[] memory ids = handler.tasks();
        address[] memory ws = handler.witnessSet();
        for (uint256 i = 0; i < ids.length; ++i) {
            uint256 required = market.getSpec(ids[i]).witnessBond;
            TaskState memory t = market.getTaskState(ids[i]);
            bool settled = t.status == TaskStatus.Sealed || t.status == TaskStatus.Cancelled;
            uint256 held;
            for (uint256 j = 0; j < ws.length; ++j) {
                WitnessRecord memory w = market.getWitness(ids[i], ws[j]);
                uint256 refunded = handler.bondRefunded(ids[i], ws[j]);
                vm.assertEq(w.bonded, handler.bondedOnce(ids[i], ws[j]), "bonded <=> WitnessBonded emitted");
                if (w.bonded) {
                    vm.assertEq(handler.bondPosted(ids[i], ws[j]), required, "posted the spec's bond");
                    vm.assertEq(
                        uint256(w.slashed) + w.bond + refunded, required, "slashed + bond + refunded == witnessBond"
                    );
                    if (!settled) vm.assertEq(uint256(w.slashed) + w.bond, required, "slashed + bond == witnessBond");
                } else {
                    vm.assertEq(uint256(w.bond) + w.slashed + refunded, 0, "an unbonded witness holds nothing");
                }
                if (settled) vm.assertEq(uint256(w.bond), 0, "bond released at settlement");
                held += w.bond;
            }
            if (t.openChallenges == 0) vm.assertEq(t.bondsHeld, held, "bondsHeld == sum of witness bonds");
        }
    }

    /// (f) Honest actors are made whole: a trainer never evicted (it committed every round it was
    /// asked to, and no fault of its own was proven) is credited at settlement its whole stake and,
    /// when the run sealed, exactly its pro-rata reward for its accepted work; a bonded witness
    /// (no fault proven in this market-only campaign) gets its whole bond back.
    function invariant_honestActorsMadeWhole() public view virtual {
        uint256[] memory ids = handler.tasks();
        address[] memory ws = handler.witnessSet();
        for (uint256 i = 0; i < ids.length; ++i) {
            TaskState memory t = market.getTaskState(ids[i]);
            if (t.status != TaskStatus.Sealed && t.status != TaskStatus.Cancelled) continue;
            TaskSpec memory spec = market.getSpec(ids[i]);
            address[] memory ts = market.getTrainers(ids[i]);
            for (uint256 k = 0; k < ts.length; ++k) {
                TrainerRecord memory r = market.getTrainer(ids[i], ts[k]);
                if (r.evicted) continue;
                vm.assertEq(r.slashed, 0, "an honest trainer is never slashed");
                vm.assertEq(handler.stakeRefunded(ids[i], ts[k]), spec.trainerStake, "honest stake refunded whole");
                uint256 earned = t.totalWeight == 0 ? 0 : (t.sealedPool * r.acceptedWeight) / t.totalWeight;
                vm.assertEq(handler.rewardPaid(ids[i], ts[k]), earned, "honest trainer paid its earned reward");
                vm.assertGe(
                    handler.stakeRefunded(ids[i], ts[k]) + handler.rewardPaid(ids[i], ts[k]),
                    uint256(spec.trainerStake) + r.reward,
                    "credit >= stake + earned reward"
                );
            }
            for (uint256 k = 0; k < ws.length; ++k) {
                if (!market.getWitness(ids[i], ws[k]).bonded) continue;
                vm.assertEq(handler.bondRefunded(ids[i], ws[k]), spec.witnessBond, "honest witness bond back whole");
            }
        }
    }
}
