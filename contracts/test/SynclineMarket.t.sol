// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "./base/Vm.sol";

import {SynclineTest} from "./base/SynclineTest.sol";
import {Vm} from "./base/Vm.sol";
import {ISynclineEvents} from "../src/ISynclineEvents.sol";
import {ISynclineCourt} from "../src/ISynclineCourt.sol";
import {SynclineMarket} from "../src/SynclineMarket.sol";
import {
    TaskSpec,
    TaskState,
    TaskStatus,
    TrainerRecord,
    WitnessRecord,
    TrainingReceipt,
    TrainerReceipt,
    WitnessReceipt
} from "../src/SynclineTypes.sol";

/// @notice Settlement: seal (pro-rata rewards, fees, stake refunds, sponsor refund), getReceipt,
/// and whole life cycles checked to the wei.
contract SynclineMarketTest is SynclineTest {
    bytes32 internal constant ALT_ROOT = keccak256("forked-state");

    function _withdrawAll(address[] memory accounts) internal {
        for (uint256 i = 0; i < accounts.length; ++i) {
            uint256 credit = market.creditOf(accounts[i]);
            if (credit == 0) continue;
            uint256 before = accounts[i].balance;
            vm.prank(accounts[i]);
            market.withdraw();
            vm.assertEq(accounts[i].balance, before + credit, "withdrawal pays the credit to the wei");
            vm.assertEq(market.creditOf(accounts[i]), 0, "credit cleared");
        }
    }

    /// @dev Commits for the fragments in `commitMask` (which must be active trainers).
    function _commitMask(uint256 id, uint32 round, uint256 commitMask) internal {
        address[] memory ts = market.getTrainers(id);
        for (uint256 i = 0; i < ts.length; ++i) {
            if (commitMask & (uint256(1) << i) != 0) _commit(id, round, ts[i]);
        }
    }

    // ================================================================== seal: reverts

    function test_seal_unknownTask_reverts() public {
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 1));
        market.seal(1);
    }

    function test_seal_running_reverts() public {
        uint256 id = _postAndStart();
        _runRound(id, 0);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, id, TaskStatus.Running, TaskStatus.AwaitingSeal
            )
        );
        market.seal(id);
    }

    function test_seal_enrolling_reverts() public {
        uint256 id = _postDefault();
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, id, TaskStatus.Enrolling, TaskStatus.AwaitingSeal
            )
        );
        market.seal(id);
    }

    function test_seal_beforeChallengeWindowEnds_reverts() public {
        uint256 id = _postAndStart();
        _runAllRounds(id);
        uint64 until = uint64(_sealTime(id));
        vm.assertEq(uint256(until), block.timestamp + CHALLENGE_WINDOW, "window starts when the last round closes");
        warpTo(uint256(until) - 1);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineChallengeWindowOpen.selector, id, until));
        market.seal(id);
    }

    function testFuzz_seal_timing(uint256 offset) public {
        uint256 id = _postAndStart();
        _runAllRounds(id);
        uint64 closed = market.getTaskState(id).lastClosedAt;
        offset = bound(offset, 0, 2 * uint256(CHALLENGE_WINDOW));
        warpTo(closed + offset);
        if (offset < CHALLENGE_WINDOW) {
            vm.expectRevert(
                abi.encodeWithSelector(
                    ISynclineEvents.SynclineChallengeWindowOpen.selector, id, closed + CHALLENGE_WINDOW
                )
            );
            market.seal(id);
        } else {
            market.seal(id);
            _assertStatus(id, TaskStatus.Sealed, "sealed");
        }
    }

    function test_seal_twice_reverts() public {
        uint256 id = _postAndStart();
        _runAllRounds(id);
        _warpAndSeal(id);
        uint256 sponsorCredit = market.creditOf(sponsor);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, id, TaskStatus.Sealed, TaskStatus.AwaitingSeal
            )
        );
        market.seal(id);
        vm.assertEq(market.creditOf(sponsor), sponsorCredit, "credited once");
    }

    // ================================================================== seal: amounts

    /// Round 0: all accepted (weights 2,3,2,3). Round 1: fragment 1 committed but rejected,
    /// fragment 3 missed. Round 2: fragment 2 rejected, witness 1 dissents.
    /// Weights: t0 = 6, t1 = 6, t2 = 4, t3 = 6; total 22.
    function test_seal_proRataRewards_succeeds() public {
        uint256 id = _postAndStart();
        _runRound(id, 0);

        _commitMask(id, 1, 0x7);
        _warpPastDeadline(id);
        _finalize(id, 1, 0x5);

        uint256 mask2 = _commitAll(id, 2);
        _warpPastDeadline(id);
        uint256 accepted2 = mask2 & ~uint256(1 << 2);
        _vote(id, 2, witnesses[0], _stateRoot(id, 2), _aggRoot(id, 2), accepted2);
        _vote(id, 2, witnesses[1], ALT_ROOT, _aggRoot(id, 2), accepted2);
        _vote(id, 2, witnesses[2], _stateRoot(id, 2), _aggRoot(id, 2), accepted2);
        _assertStatus(id, TaskStatus.AwaitingSeal, "run complete");

        uint256[4] memory weight = [uint256(6), 6, 4, 6];
        uint256 total = 22;
        vm.assertEq(market.getTaskState(id).totalWeight, total, "total weight");
        uint256 rewardsPaid;
        uint256[4] memory reward;
        for (uint256 i = 0; i < 4; ++i) {
            vm.assertEq(market.getTrainer(id, trainers[i]).acceptedWeight, weight[i], "accepted weight");
            reward[i] = (POOL * weight[i]) / total;
            rewardsPaid += reward[i];
        }
        vm.assertEq(reward[0], 2_727_272_727_272_727_272, "6/22 of 10 ether");
        vm.assertEq(reward[2], 1_818_181_818_181_818_181, "4/22 of 10 ether");
        uint256 dust = POOL - rewardsPaid;
        vm.assertEq(dust, 3, "3 wei of rounding dust");

        uint256 escrow = market.escrowOf(id);
        vm.assertEq(
            escrow, POOL + 6 * uint256(FEE) + 4 * uint256(STAKE) + 3 * uint256(WITNESS_BOND), "escrow before seal"
        );
        _warpToSeal(id);

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(id, trainers[0], reward[0], "reward");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(id, trainers[0], STAKE, "stake-refund");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(id, witnesses[0], 3 * uint256(FEE), "witness-fee");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(id, witnesses[1], 2 * uint256(FEE), "witness-fee");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(id, witnesses[2], uint256(FEE), "witness-fee");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(id, sponsor, dust, "sponsor-refund");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.TaskSealed(id, _stateRoot(id, 2), rewardsPaid, 6 * uint256(FEE), dust);
        vm.prank(stranger); // anyone may seal
        market.seal(id);

        for (uint256 i = 0; i < 4; ++i) {
            vm.assertEq(market.creditOf(trainers[i]), reward[i] + STAKE, "trainer credit = reward + stake");
            vm.assertEq(market.getTrainer(id, trainers[i]).reward, reward[i], "recorded reward");
            vm.assertEq(uint256(market.getTrainer(id, trainers[i]).stake), 0, "stake released");
        }
        vm.assertEq(market.creditOf(witnesses[0]), 3 * uint256(FEE) + WITNESS_BOND, "w0 fees + bond");
        vm.assertEq(market.creditOf(witnesses[1]), 2 * uint256(FEE) + WITNESS_BOND, "w1 fees (dissented once) + bond");
        vm.assertEq(market.creditOf(witnesses[2]), uint256(FEE) + WITNESS_BOND, "w2 fees + bond");
        vm.assertEq(market.creditOf(sponsor), dust, "sponsor gets the dust, all fees were earned");
        vm.assertEq(market.escrowOf(id), 0, "escrow empty");

        TaskState memory t = market.getTaskState(id);
        vm.assertEq(uint256(t.status), uint256(TaskStatus.Sealed), "sealed");
        vm.assertEq(t.sealedPool, POOL, "sealedPool");
        vm.assertEq(t.sponsorRefund, dust, "sponsorRefund");
        vm.assertEq(t.rewardPool + t.feeBudget + t.feesEarned + t.stakeHeld, 0, "nothing held");

        // Receipt.
        TrainingReceipt memory rc = _receipt(id);
        vm.assertEq(rc.taskId, id, "receipt id");
        vm.assertEq(rc.specHash, keccak256("syncline-spec-v1"), "receipt specHash");
        vm.assertEq(uint256(rc.status), uint256(TaskStatus.Sealed), "receipt status");
        vm.assertEq(rc.finalStateRoot, _stateRoot(id, 2), "receipt final root");
        vm.assertEq(uint256(rc.roundsTotal), ROUNDS, "roundsTotal");
        vm.assertEq(uint256(rc.roundsFinalized), 3, "roundsFinalized");
        vm.assertEq(uint256(rc.roundsCarried), 0, "roundsCarried");
        vm.assertEq(rc.rewardPool, POOL, "receipt pool = sealed pool");
        vm.assertEq(rc.sponsorRefund, dust, "receipt sponsorRefund");
        vm.assertEq(rc.trainers.length, 4, "trainer lines");
        uint32[4] memory accepted = [uint32(3), 2, 2, 2];
        uint32[4] memory submitted = [uint32(3), 3, 3, 2];
        for (uint256 i = 0; i < 4; ++i) {
            TrainerReceipt memory tr = rc.trainers[i];
            vm.assertEq(tr.trainer, trainers[i], "line trainer");
            vm.assertEq(uint256(tr.fragment), i, "line fragment");
            vm.assertFalse(tr.evicted, "line evicted");
            vm.assertEq(uint256(tr.submitted), submitted[i], "line submitted");
            vm.assertEq(uint256(tr.accepted), accepted[i], "line accepted");
            vm.assertEq(uint256(tr.missed), i == 3 ? 1 : 0, "line missed");
            vm.assertEq(tr.acceptedWeight, weight[i], "line weight");
            vm.assertEq(tr.reward, reward[i], "line reward");
            vm.assertEq(tr.stakeRefund, STAKE, "line stake refund");
            vm.assertEq(tr.slashed, 0, "line slashed");
        }
        vm.assertEq(rc.witnesses.length, 3, "witness lines");
        WitnessReceipt memory w1 = rc.witnesses[1];
        vm.assertEq(w1.witness, witnesses[1], "w1");
        vm.assertEq(uint256(w1.votes), 3, "w1 votes");
        vm.assertEq(uint256(w1.matched), 2, "w1 matched");
        vm.assertEq(uint256(w1.dissents), 1, "w1 dissents");
        vm.assertEq(w1.fees, 2 * uint256(FEE), "w1 fees");
        vm.assertEq(uint256(rc.witnesses[2].votes), 1, "w2 votes");
        vm.assertEq(uint256(rc.witnesses[2].matched), 1, "w2 matched");

        // Everyone withdraws: the market is empty to the wei.
        _assertMoneyInvariant(_one(id), _allActors());
        _withdrawAll(_allActors());
        vm.assertEq(address(market).balance, 0, "market empty");
    }

    function test_seal_carriedRounds_refundUnearnedFees_succeeds() public {
        uint256 id = _postAndStart();
        _runRound(id, 0);
        _commitAll(id, 1);
        _warpPastGrace(id);
        market.carryForward(id, 1);
        _commitAll(id, 2);
        _warpPastGrace(id);
        market.carryForward(id, 2);
        _warpAndSeal(id);

        // Only round 0 paid: 2 fees earned; 4 unearned fees go back. Weights 2,3,2,3 of 10: no dust.
        vm.assertEq(market.creditOf(sponsor), 4 * uint256(FEE), "unearned fees back to the sponsor");
        vm.assertEq(market.creditOf(trainers[1]), 3 ether + STAKE, "3/10 of the pool + stake");
        vm.assertEq(market.creditOf(trainers[0]), 2 ether + STAKE, "2/10 of the pool + stake");
        vm.assertEq(market.creditOf(witnesses[0]), FEE + WITNESS_BOND, "w0 one fee + bond");
        vm.assertEq(market.creditOf(witnesses[2]), WITNESS_BOND, "w2 its bond only");
        TrainingReceipt memory rc = _receipt(id);
        vm.assertEq(uint256(rc.roundsCarried), 2, "carried");
        vm.assertEq(uint256(rc.roundsFinalized), 1, "finalized");
        vm.assertEq(rc.finalStateRoot, _stateRoot(id, 0), "final root = last finalized");
        _assertMoneyInvariant(_one(id), _allActors());
    }

    function test_seal_noAcceptedWork_poolBackToSponsor_succeeds() public {
        uint256 id = _postAndStart();
        for (uint32 r = 0; r < ROUNDS; ++r) {
            _commitAll(id, r);
            _warpPastDeadline(id);
            _finalize(id, r, 0); // every submission rejected
        }
        _warpAndSeal(id);
        vm.assertEq(market.creditOf(sponsor), POOL, "whole pool back");
        for (uint256 i = 0; i < 4; ++i) {
            vm.assertEq(market.creditOf(trainers[i]), STAKE, "stake only");
            vm.assertEq(market.getTrainer(id, trainers[i]).reward, 0, "no reward");
        }
        vm.assertEq(market.creditOf(witnesses[0]), 3 * uint256(FEE) + WITNESS_BOND, "witnesses still paid");
        TaskState memory t = market.getTaskState(id);
        vm.assertEq(t.sponsorRefund, POOL, "sponsorRefund");
        vm.assertEq(t.sealedPool, POOL, "sealedPool");
        _assertMoneyInvariant(_one(id), _allActors());
    }

    function test_seal_allCarried_everythingBack_succeeds() public {
        uint256 id = _postAndStart();
        for (uint32 r = 0; r < ROUNDS; ++r) {
            _commitAll(id, r); // committing keeps everyone from eviction
            _warpPastGrace(id);
            market.carryForward(id, r);
        }
        _warpAndSeal(id);
        vm.assertEq(market.creditOf(sponsor), POOL + 6 * uint256(FEE), "pool and whole fee budget back");
        vm.assertEq(market.creditOf(trainers[2]), STAKE, "stake back");
        vm.assertEq(_receipt(id).finalStateRoot, keccak256("initial-state"), "initial root carried");
        _assertMoneyInvariant(_one(id), _allActors());
    }

    function test_seal_evictedTrainer_refundMinusSlash_succeeds() public {
        uint256 id = _postAndStart();
        _runRound(id, 0); // t1 earns weight 3 in round 0
        for (uint32 r = 1; r < ROUNDS; ++r) {
            _commitMask(id, r, 0xd); // fragments 0, 2, 3; t1 misses rounds 1 and 2
            _warpPastDeadline(id);
            _finalize(id, r, 0xd);
        }
        // t1 is evicted when round 2 closes (2 consecutive misses > 1); weights assigned at commit.
        TrainerRecord memory r1 = market.getTrainer(id, trainers[1]);
        vm.assertTrue(r1.evicted, "evicted");
        uint256 slash = (uint256(STAKE) * SLASH_BPS) / 10_000;
        uint256 pool = POOL + slash;
        vm.assertEq(market.getTaskState(id).rewardPool, pool, "slash joined the pool");
        // Weights: round 0: 2,3,2,3; rounds 1 and 2: 2,-,2,3 -> t0 6, t1 3, t2 6, t3 9; total 24.
        uint256[4] memory weight = [uint256(6), 3, 6, 9];
        _warpAndSeal(id);
        uint256 paid;
        for (uint256 i = 0; i < 4; ++i) {
            uint256 reward = (pool * weight[i]) / 24;
            paid += reward;
            uint256 stake = i == 1 ? STAKE - slash : STAKE;
            vm.assertEq(market.creditOf(trainers[i]), reward + stake, "reward + stake minus slash");
        }
        vm.assertEq(market.creditOf(sponsor), pool - paid, "dust");
        TrainerReceipt memory line = _receipt(id).trainers[1];
        vm.assertTrue(line.evicted, "receipt evicted");
        vm.assertEq(line.slashed, slash, "receipt slashed");
        vm.assertEq(line.stakeRefund, STAKE - slash, "receipt stake refund");
        vm.assertEq(uint256(line.missed), 2, "receipt missed");
        vm.assertEq(_receipt(id).rewardPool, pool, "receipt pool includes the slash");
        _assertMoneyInvariant(_one(id), _allActors());
        _withdrawAll(_allActors());
        vm.assertEq(address(market).balance, 0, "market empty");
    }

    function testFuzz_seal_conservesValue(uint256 pool, uint128 stake, uint128 fee, uint256 acceptSeed, uint16 shards)
        public
    {
        pool = bound(pool, 1, 1_000_000 ether);
        stake = uint128(bound(stake, 2, 10_000 ether));
        fee = uint128(bound(fee, 0, 10 ether));
        shards = uint16(bound(shards, MAX_TRAINERS, 256));
        TaskSpec memory s = _defaultSpec();
        s.trainerStake = stake;
        s.witnessFee = fee;
        s.shardCount = shards;
        pool = _deterredPool(s, pool);
        vm.deal(sponsor, pool + _feeBudget(s));
        uint256 id = _post(s, pool);
        _bondAll(id);
        _enrollMany(id, MAX_TRAINERS);
        uint256 escrow = market.escrowOf(id);
        vm.assertEq(escrow, pool + _feeBudget(s) + 4 * uint256(stake) + 3 * uint256(WITNESS_BOND), "escrow");

        for (uint32 r = 0; r < ROUNDS; ++r) {
            uint256 mask = _commitAll(id, r);
            _warpPastDeadline(id);
            uint256 accepted = mask & (acceptSeed >> (8 * r));
            _finalize(id, r, accepted);
        }
        uint256 total = market.getTaskState(id).totalWeight;
        vm.assertEq(market.escrowOf(id), escrow, "escrow unchanged until seal");
        _warpAndSeal(id);

        uint256 paid;
        uint256 credited;
        for (uint256 i = 0; i < 4; ++i) {
            uint256 w = market.getTrainer(id, trainers[i]).acceptedWeight;
            uint256 expected = total == 0 ? 0 : (pool * w) / total;
            paid += expected;
            vm.assertEq(market.creditOf(trainers[i]), expected + stake, "trainer credit");
            credited += market.creditOf(trainers[i]);
        }
        for (uint256 i = 0; i < N_WITNESSES; ++i) {
            credited += market.creditOf(witnesses[i]);
        }
        vm.assertEq(market.creditOf(witnesses[0]), 3 * uint256(fee) + WITNESS_BOND, "w0 voted in every quorum");
        uint256 dust = pool - paid;
        vm.assertEq(market.creditOf(sponsor), dust, "sponsor gets what trainers did not");
        if (total != 0) vm.assertLt(dust, 4, "dust below the number of trainers");
        credited += market.creditOf(sponsor);
        vm.assertEq(credited, escrow, "every wei escrowed is credited exactly once");
        vm.assertEq(address(market).balance, escrow, "balance = credits");
        _withdrawAll(_allActors());
        vm.assertEq(address(market).balance, 0, "market empty");
    }

    function test_seal_with64Trainers_succeeds() public {
        TaskSpec memory s = _defaultSpec();
        s.minTrainers = 1;
        s.maxTrainers = 64;
        s.shardCount = 256;
        s.rounds = 1;
        uint256 id = _post(s, POOL);
        _bondAll(id);
        _enrollMany(id, 64);
        _runRound(id, 0);
        _warpAndSeal(id);
        // 256 shards over 64 trainers: 4 each, so each gets exactly 1/64 of the pool.
        vm.assertEq(market.creditOf(_trainerAt(63)), POOL / 64 + STAKE, "equal share");
        vm.assertEq(market.creditOf(sponsor), POOL % 64, "dust");
    }

    // ================================================================== seal: witness bonds

    /// Bonds come back at seal to the wei, after the witness fees and before the sponsor refund.
    function test_seal_refundsWitnessBonds_succeeds() public {
        uint256 id = _post(_bondedSpec(), POOL);
        _enrollMany(id, MAX_TRAINERS);
        _bondAll(id);
        uint256 escrow = POOL + 6 * uint256(FEE) + 4 * uint256(STAKE) + 3 * uint256(WITNESS_BOND);
        vm.assertEq(market.escrowOf(id), escrow, "escrow with bonds");
        _runAllRounds(id); // witnesses 0 and 1 vote in every round; weights 2,3,2,3 of 10: no dust
        vm.assertEq(market.escrowOf(id), escrow, "bonds stay held through the run");
        _warpToSeal(id);

        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(id, witnesses[1], 3 * uint256(FEE), "witness-fee");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(id, witnesses[0], WITNESS_BOND, "bond-refund");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(id, witnesses[1], WITNESS_BOND, "bond-refund");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.Credited(id, witnesses[2], WITNESS_BOND, "bond-refund");
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.TaskSealed(id, _stateRoot(id, 2), POOL, 6 * uint256(FEE), 0);
        market.seal(id);

        vm.assertEq(market.creditOf(witnesses[0]), 3 * uint256(FEE) + WITNESS_BOND, "w0: fees + bond");
        vm.assertEq(market.creditOf(witnesses[1]), 3 * uint256(FEE) + WITNESS_BOND, "w1: fees + bond");
        vm.assertEq(market.creditOf(witnesses[2]), WITNESS_BOND, "w2 never voted: bond only");
        vm.assertEq(market.creditOf(sponsor), 0, "no dust, every fee earned");
        TaskState memory t = market.getTaskState(id);
        vm.assertEq(t.bondsHeld, 0, "bondsHeld");
        vm.assertEq(market.escrowOf(id), 0, "escrow empty");
        for (uint256 i = 0; i < N_WITNESSES; ++i) {
            WitnessRecord memory w = market.getWitness(id, witnesses[i]);
            vm.assertEq(uint256(w.bond), 0, "bond released");
            vm.assertEq(uint256(w.slashed), 0, "nothing slashed");
        }
        _assertMoneyInvariant(_one(id), _allActors());
        _withdrawAll(_allActors());
        vm.assertEq(address(market).balance, 0, "market empty");
    }

    /// Random bond, random subset of bonded witnesses (at least a quorum), random accepted sets:
    /// every wei escrowed (bonds included) is credited exactly once, bonds to their witnesses.
    function testFuzz_seal_bondsConserveValue(uint128 bond, uint8 bondedMask, uint256 acceptSeed, uint256 pool) public {
        bond = uint128(bound(bond, 1, 100 ether));
        pool = bound(pool, 1, 1_000 ether);
        bondedMask = uint8(bound(bondedMask, 0, 7)) | 0x3; // witnesses 0 and 1 vote, so they bond
        TaskSpec memory s = _defaultSpec();
        s.witnessBond = bond;
        pool = _deterredPool(s, pool);
        uint256 id = _post(s, pool);
        _enrollMany(id, MAX_TRAINERS);
        uint256 bonds;
        for (uint256 i = 0; i < N_WITNESSES; ++i) {
            if (bondedMask & (1 << i) == 0) continue;
            _bond(id, witnesses[i]);
            bonds += bond;
        }
        uint256 escrow = market.escrowOf(id);
        vm.assertEq(escrow, pool + _feeBudget(s) + 4 * uint256(STAKE) + bonds, "escrow");
        for (uint32 r = 0; r < ROUNDS; ++r) {
            uint256 mask = _commitAll(id, r);
            _warpPastDeadline(id);
            _finalize(id, r, mask & (acceptSeed >> (8 * r)));
        }
        _warpAndSeal(id);

        uint256 credited = market.creditOf(sponsor);
        for (uint256 i = 0; i < MAX_TRAINERS; ++i) {
            credited += market.creditOf(trainers[i]);
        }
        for (uint256 i = 0; i < N_WITNESSES; ++i) {
            uint256 c = market.creditOf(witnesses[i]);
            uint256 fees = market.getWitness(id, witnesses[i]).fees;
            vm.assertEq(c, fees + (bondedMask & (1 << i) != 0 ? bond : 0), "witness credit = fees + own bond");
            credited += c;
        }
        vm.assertEq(credited, escrow, "every wei escrowed is credited exactly once");
        vm.assertEq(market.getTaskState(id).bondsHeld, 0, "no bond left");
        _assertMoneyInvariant(_one(id), _allActors());
        _withdrawAll(_allActors());
        vm.assertEq(address(market).balance, 0, "market empty");
    }

    // ================================================================== deployment and plain payments

    /// @dev Deploys the market's creation code by hand, returning the revert data if it fails.
    function _rawDeploy(address courtModule) internal returns (address deployed, bytes memory revertData) {
        bytes memory init = abi.encodePacked(vm.getCode("SynclineMarket.sol:SynclineMarket"), abi.encode(courtModule));
        // assembly: CREATE with the init code, then copy whatever the constructor reverted with.
        assembly ("memory-safe") {
            deployed := create(0, add(init, 0x20), mload(init))
        }
        if (deployed == address(0)) {
            assembly ("memory-safe") {
                revertData := mload(0x40)
                mstore(revertData, returndatasize())
                returndatacopy(add(revertData, 0x20), 0, returndatasize())
                mstore(0x40, add(add(revertData, 0x20), returndatasize()))
            }
        }
    }

    function test_constructor_courtWithoutCode_reverts() public {
        address[3] memory bad = [address(0), stranger, address(0xC0047)];
        bytes memory expected = abi.encodeWithSelector(ISynclineEvents.SynclineSpecFieldInvalid.selector, "court");
        for (uint256 i = 0; i < bad.length; ++i) {
            (address deployed, bytes memory err) = _rawDeploy(bad[i]);
            vm.assertEq(deployed, address(0), "not deployed");
            vm.assertEq(err, expected, "SynclineSpecFieldInvalid(court)");
        }
    }

    function test_constructor_withCourt_succeeds() public {
        (address deployed, bytes memory err) = _rawDeploy(courtModule);
        vm.assertTrue(deployed != address(0), "deployed");
        vm.assertEq(err.length, 0, "no revert");
        vm.assertEq(SynclineMarket(payable(deployed)).COURT(), courtModule, "COURT");
        vm.assertEq(market.COURT(), courtModule, "fixture market's COURT");
        // Calls the market does not implement run in the court, on the market's storage.
        vm.assertEq(ISynclineCourt(deployed).challengeCount(), 0, "served through the fallback");
    }

    function test_receive_directPayment_reverts() public {
        uint256 id = _postDefault();
        uint256 balanceBefore = address(market).balance;
        uint256[2] memory amounts = [uint256(0), 1 ether];
        for (uint256 i = 0; i < amounts.length; ++i) {
            vm.prank(sponsor);
            (bool ok, bytes memory err) = address(market).call{value: amounts[i]}("");
            vm.assertFalse(ok, "plain transfer refused");
            vm.assertEq(err, abi.encodeWithSelector(ISynclineEvents.SynclineDirectPayment.selector), "error");
        }
        bool sent = payable(address(market)).send(1 ether); // from the test contract's own balance
        vm.assertFalse(sent, "send refused");
        vm.assertEq(address(market).balance, balanceBefore, "balance unchanged");
        _assertMoneyInvariant(_one(id), _allActors());
    }

    function testFuzz_receive_directPayment_reverts(uint256 amount) public {
        amount = bound(amount, 0, ACTOR_FUNDS);
        vm.prank(stranger);
        (bool ok, bytes memory err) = address(market).call{value: amount}("");
        vm.assertFalse(ok, "plain transfer refused");
        vm.assertEq(err, abi.encodeWithSelector(ISynclineEvents.SynclineDirectPayment.selector), "error");
        vm.assertEq(address(market).balance, 0, "nothing kept");
    }

    // ================================================================== getReceipt

    function test_getReceipt_enrolling_succeeds() public {
        uint256 id = _postDefault();
        _enroll(id, trainers[0]);
        TrainingReceipt memory rc = _receipt(id);
        vm.assertEq(uint256(rc.status), uint256(TaskStatus.Enrolling), "status");
        vm.assertEq(rc.finalStateRoot, keccak256("initial-state"), "root");
        vm.assertEq(rc.rewardPool, POOL, "live pool");
        vm.assertEq(rc.sponsorRefund, 0, "no refund yet");
        vm.assertEq(rc.trainers.length, 1, "one trainer");
        vm.assertEq(rc.trainers[0].stakeRefund, 0, "stake not settled yet");
        vm.assertEq(rc.witnesses.length, N_WITNESSES, "witness lines");
        vm.assertEq(rc.witnesses[2].witness, witnesses[2], "witness order");
    }

    function test_getReceipt_running_succeeds() public {
        uint256 id = _postAndStart();
        _runRound(id, 0);
        _commit(id, 1, trainers[0]); // one commit: the others' absence counts as a miss
        _warpPastGrace(id);
        market.carryForward(id, 1);
        TrainingReceipt memory rc = _receipt(id);
        vm.assertEq(uint256(rc.status), uint256(TaskStatus.Running), "status");
        vm.assertEq(uint256(rc.roundsFinalized), 1, "finalized");
        vm.assertEq(uint256(rc.roundsCarried), 1, "carried");
        vm.assertEq(rc.finalStateRoot, _stateRoot(id, 0), "current root");
        vm.assertEq(rc.trainers[1].acceptedWeight, 3, "weight so far");
        vm.assertEq(uint256(rc.trainers[1].missed), 1, "missed the carried round");
        vm.assertEq(rc.trainers[1].stakeRefund, 0, "not settled");
        vm.assertEq(rc.witnesses[0].fees, FEE, "fees so far");
    }

    // ================================================================== whole life cycles

    function test_lifecycle_twoTasksShareActors_succeeds() public {
        uint256 a = _postAndStart();
        TaskSpec memory s = _defaultSpec();
        s.rounds = 1;
        s.trainerStake = 3 ether; // deters: 2 x (3 ether / (1 round x 2 trainers)) <= 3 ether
        uint256 b = _post(s, 3 ether);
        _bondAll(b);
        _enroll(b, trainers[0]);
        _enroll(b, trainers[4]);
        warpTo(s.enrollmentDeadline + 1);
        market.startRun(b);

        uint256[] memory ids = new uint256[](2);
        ids[0] = a;
        ids[1] = b;
        _assertMoneyInvariant(ids, _allActors());

        // Task a's round 0 got no votes and its grace window passed while b enrolled.
        vm.assertGt(block.timestamp, _deadline(a) + GRACE, "a's grace window is over");
        market.carryForward(a, 0);
        // a's round 1 and b's round 0 run side by side.
        uint256 maskA = _commitAll(a, 1);
        uint256 maskB = _commitAll(b, 0);
        _warpPastDeadline(a);
        _finalize(a, 1, maskA);
        _finalize(b, 0, maskB);
        _runRound(a, 2);
        _assertMoneyInvariant(ids, _allActors());

        _warpAndSeal(b);
        _assertMoneyInvariant(ids, _allActors());
        // trainer0 in b: weight 5 of 10 -> 1.5 ether + 3 ether stake.
        vm.assertEq(market.creditOf(trainers[0]), 1.5 ether + 3 ether, "trainer0 credit from b");
        _warpAndSeal(a);
        _assertMoneyInvariant(ids, _allActors());

        // trainer0 in a: weight 2+2 of 20 -> 2 ether + STAKE; credits add up across tasks.
        vm.assertEq(market.creditOf(trainers[0]), 3.5 ether + 3 ether + STAKE, "credits accumulate");
        _withdrawAll(_allActors());
        vm.assertEq(address(market).balance, 0, "market empty");
    }
}
