// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {TestBase} from "../base/TestBase.sol";
import {MerkleRef} from "../court/MerkleRef.sol";
import {ChunkMerkle} from "../../src/libraries/ChunkMerkle.sol";

/// @notice Exposes `ChunkMerkle.verify` (its path is calldata).
contract ChunkMerkleHarness {
    function verify(bytes32 root, uint256 index, uint256 leafCount, bytes32 contentHash, bytes32[] calldata path)
        external
        pure
        returns (bool)
    {
        return ChunkMerkle.verify(root, index, leafCount, contentHash, path);
    }
}

/// @notice `ChunkMerkle.verify` against the protocol's tree (`agents/syncline/protocol/merkle.py`):
/// roots computed by the Python reference are pinned here, the test-side `MerkleRef` (a
/// level-by-level transcription of merkle.py) reproduces them, and `verify` accepts exactly the
/// proofs `MerkleRef.proof` (= `merkle.proof`) produces.
contract ChunkMerkleTest is TestBase {
    event log_named_uint(string key, uint256 val);

    ChunkMerkleHarness internal h;

    function setUp() public {
        h = new ChunkMerkleHarness();
    }

    /// @dev Content hash i of the pinned vectors: keccak256 of i as a 32-byte big-endian word.
    function _hashes(uint256 n) internal pure returns (bytes32[] memory out) {
        out = new bytes32[](n);
        for (uint256 i = 0; i < n; ++i) {
            out[i] = keccak256(abi.encode(i));
        }
    }

    function _randomHashes(uint256 seed, uint256 n) internal pure returns (bytes32[] memory out) {
        out = new bytes32[](n);
        for (uint256 i = 0; i < n; ++i) {
            out[i] = keccak256(abi.encode(seed, i));
        }
    }

    // ------------------------------------------------------------------ parity with merkle.py

    /// Roots printed by `merkle.root([keccak(i.to_bytes(32, "big")) for i in range(n)])`.
    function test_rootsMatchPython() public pure {
        uint256[8] memory ns = [uint256(1), 2, 3, 5, 7, 8, 13, 3907];
        bytes32[8] memory roots = [
            bytes32(0xb7e97e6b4b2c7cd5fb9b51a86ad7eae441872b770b5953443024cb1e0bc6f67d),
            0x0322619aad663c75f21f7171e70dca9e014e3e801c4dcef48bafc14973976e3c,
            0xb73a7b0599e805e37b3a47cd49ec57c9f1e1c706a98fefedfe0aff2eaec6588a,
            0xdfcee13001e448aa0c07c2f5f60790ae20bf84ca5208cb7372219909fc4874b6,
            0x6a8c17988aa53601f8370c88df703743647d1a8560860ff74c1a43e0cb4d6cd6,
            0x2240da833151aa3c7205568ec0d25659a6e4faee1388758e8eddf2acdfacc4fb,
            0x8483737f1bae33f9f93fc4e129363530fb86779006b4019960357bd73f9da6cf,
            0xe51bafa41b317362da95396c3255dd12723a1073e9204545aa8ae23c14763d9d
        ];
        for (uint256 k = 0; k < ns.length; ++k) {
            vm.assertEq(MerkleRef.root(_hashes(ns[k])), roots[k], "root differs from merkle.py");
        }
    }

    /// Proofs printed by `merkle.proof(hashes, n - 1)`: the carried levels contribute nothing.
    function test_proofsMatchPython() public view {
        // n = 3, last leaf: carried at level 0, sibling node(0, 1) at level 1.
        bytes32[] memory p3 = MerkleRef.proof(_hashes(3), 2);
        vm.assertEq(p3.length, 1, "n=3 path length");
        vm.assertEq(p3[0], 0x0322619aad663c75f21f7171e70dca9e014e3e801c4dcef48bafc14973976e3c, "n=3 sibling");
        // n = 7, last leaf: carried, then two siblings.
        bytes32[] memory p7 = MerkleRef.proof(_hashes(7), 6);
        vm.assertEq(p7.length, 2, "n=7 path length");
        vm.assertEq(p7[0], 0x2abbb82981dcf5a54eec032a373c28ca2105021087d9484e1ef4c80238ac2761, "n=7 sibling 0");
        vm.assertEq(p7[1], 0xc968b1e61d6c1f366974695bff53d078d3960ed2b26daf71612007b335c549e5, "n=7 sibling 1");
        // n = 13, last leaf: carried twice, then the 4-leaf and 8-leaf subtrees.
        bytes32[] memory p13 = MerkleRef.proof(_hashes(13), 12);
        vm.assertEq(p13.length, 2, "n=13 path length");
        vm.assertEq(p13[0], 0x0773424369d26fce04146f61ce131119910a658d4a35448b06023afc3aed8f2c, "n=13 sibling 0");
        vm.assertEq(p13[1], 0x2240da833151aa3c7205568ec0d25659a6e4faee1388758e8eddf2acdfacc4fb, "n=13 sibling 1");
        vm.assertTrue(h.verify(MerkleRef.root(_hashes(13)), 12, 13, _hashes(13)[12], p13), "verifies");
        // 3,907 leaves (a 1,000,000-parameter model): depth 12, last leaf carried 6 times.
        vm.assertEq(MerkleRef.proof(_hashes(3907), 3906).length, 6, "n=3907 path length");
    }

    /// The root of a single leaf is the leaf; its proof is empty.
    function test_singleLeaf() public view {
        bytes32 c = keccak256("only");
        bytes32 root = MerkleRef.leaf(0, c);
        vm.assertEq(MerkleRef.root(_single(c)), root, "root = leaf");
        vm.assertTrue(h.verify(root, 0, 1, c, new bytes32[](0)), "empty proof");
        bytes32[] memory extra = new bytes32[](1);
        vm.assertFalse(h.verify(root, 0, 1, c, extra), "no sibling in a 1-leaf tree");
        vm.assertFalse(h.verify(root, 1, 1, c, new bytes32[](0)), "index 1 of 1");
        vm.assertFalse(h.verify(root, 0, 0, c, new bytes32[](0)), "no leaves");
        // Not the raw content hash: the index is bound into the leaf.
        vm.assertFalse(h.verify(c, 0, 1, c, new bytes32[](0)), "raw hash is not a root");
    }

    function _single(bytes32 c) internal pure returns (bytes32[] memory out) {
        out = new bytes32[](1);
        out[0] = c;
    }

    // ------------------------------------------------------------------ completeness

    /// Every leaf of every tree with 1..40 leaves verifies with its `merkle.proof` path.
    function test_everyLeafVerifies_upTo40() public view {
        for (uint256 n = 1; n <= 40; ++n) {
            bytes32[] memory hs = _randomHashes(n, n);
            bytes32 root = MerkleRef.root(hs);
            for (uint256 i = 0; i < n; ++i) {
                bytes32[] memory path = MerkleRef.proof(hs, i);
                vm.assertTrue(h.verify(root, i, n, hs[i], path), "valid proof refused");
                vm.assertEq(MerkleRef.rootFromPath(i, n, hs[i], path), root, "rootFromPath");
            }
        }
    }

    function testFuzz_validProofVerifies(uint256 seed, uint16 nRaw, uint16 iRaw) public view {
        uint256 n = 1 + (uint256(nRaw) % 600);
        uint256 i = uint256(iRaw) % n;
        bytes32[] memory hs = _randomHashes(seed, n);
        vm.assertTrue(h.verify(MerkleRef.root(hs), i, n, hs[i], MerkleRef.proof(hs, i)), "valid proof refused");
    }

    // ------------------------------------------------------------------ soundness

    /// Any single flipped bit in the content, the root or a sibling is refused.
    function testFuzz_tamperedProofRefused(uint256 seed, uint16 nRaw, uint16 iRaw, uint8 bit, uint8 what) public view {
        uint256 n = 2 + (uint256(nRaw) % 300);
        uint256 i = uint256(iRaw) % n;
        bytes32[] memory hs = _randomHashes(seed, n);
        bytes32 root = MerkleRef.root(hs);
        bytes32[] memory path = MerkleRef.proof(hs, i);
        bytes32 flip = bytes32(uint256(1) << bit);
        bytes32 content = hs[i];
        uint256 k = what % 3;
        if (k == 0) content ^= flip;
        else if (k == 1) root ^= flip;
        else path[uint256(seed) % path.length] ^= flip;
        vm.assertFalse(h.verify(root, i, n, content, path), "tampered proof accepted");
    }

    /// A proof of leaf j does not open leaf i != j (the index is bound into the leaf hash).
    function testFuzz_otherPositionRefused(uint256 seed, uint16 nRaw, uint16 iRaw, uint16 jRaw) public view {
        uint256 n = 2 + (uint256(nRaw) % 300);
        uint256 i = uint256(iRaw) % n;
        uint256 j = uint256(jRaw) % n;
        vm.assume(i != j);
        bytes32[] memory hs = _randomHashes(seed, n);
        bytes32 root = MerkleRef.root(hs);
        vm.assertFalse(h.verify(root, i, n, hs[j], MerkleRef.proof(hs, j)), "leaf j's proof opened leaf i");
        vm.assertFalse(h.verify(root, i, n, hs[j], MerkleRef.proof(hs, i)), "content j at position i");
    }

    /// A path with an element too many or too few is refused, and so are out-of-range indices.
    function testFuzz_wrongPathLengthRefused(uint256 seed, uint16 nRaw, uint16 iRaw) public view {
        uint256 n = 2 + (uint256(nRaw) % 300);
        uint256 i = uint256(iRaw) % n;
        bytes32[] memory hs = _randomHashes(seed, n);
        bytes32 root = MerkleRef.root(hs);
        bytes32[] memory path = MerkleRef.proof(hs, i);
        bytes32[] memory longer = new bytes32[](path.length + 1);
        bytes32[] memory shorter = new bytes32[](path.length - 1);
        for (uint256 k = 0; k < path.length; ++k) {
            longer[k] = path[k];
            if (k + 1 < path.length) shorter[k] = path[k];
        }
        longer[path.length] = path[path.length - 1];
        vm.assertFalse(h.verify(root, i, n, hs[i], longer), "long path accepted");
        vm.assertFalse(h.verify(root, i, n, hs[i], shorter), "short path accepted");
        vm.assertFalse(h.verify(root, i, n, hs[i], new bytes32[](0)), "empty path accepted");
        vm.assertFalse(h.verify(root, n + i, n, hs[i], path), "index beyond the leaves accepted");
    }

    /// The leaf count decides where nodes are carried: the last leaf of a 3-leaf tree is carried
    /// at level 0, of a 4-leaf tree it is not, so its 3-leaf proof is refused as a 4-leaf one.
    function test_leafCountMatters() public view {
        bytes32[] memory hs3 = _hashes(3);
        bytes32 root3 = MerkleRef.root(hs3);
        bytes32[] memory p = MerkleRef.proof(hs3, 2);
        vm.assertTrue(h.verify(root3, 2, 3, hs3[2], p), "3-leaf proof");
        vm.assertFalse(h.verify(root3, 2, 4, hs3[2], p), "read as a 4-leaf tree");
        vm.assertFalse(h.verify(root3, 2, 2, hs3[2], p), "index 2 of 2");
        // Leaf 4 of 5 is carried twice; as a 6-leaf tree it would need a sibling at level 0.
        bytes32[] memory hs5 = _hashes(5);
        bytes32[] memory p5 = MerkleRef.proof(hs5, 4);
        vm.assertEq(p5.length, 1, "one sibling");
        vm.assertTrue(h.verify(MerkleRef.root(hs5), 4, 5, hs5[4], p5), "5-leaf proof");
        vm.assertFalse(h.verify(MerkleRef.root(hs5), 4, 6, hs5[4], p5), "read as a 6-leaf tree");
    }

    /// An internal node cannot be passed off as a leaf: leaves are keccak(index || hash), and
    /// the index is a small integer, never a node hash.
    function test_internalNodeIsNoLeaf() public view {
        bytes32[] memory hs = _hashes(4);
        bytes32 l0 = MerkleRef.leaf(0, hs[0]);
        bytes32 l1 = MerkleRef.leaf(1, hs[1]);
        bytes32 n01 = MerkleRef.parent(l0, l1);
        bytes32 root = MerkleRef.root(hs);
        bytes32[] memory path = new bytes32[](1);
        path[0] = MerkleRef.parent(MerkleRef.leaf(2, hs[2]), MerkleRef.leaf(3, hs[3]));
        // Claim "n01's right half" as the content of leaf 0 of a 2-leaf tree of nodes.
        vm.assertFalse(h.verify(root, 0, 2, n01, path), "node as leaf");
        vm.assertFalse(h.verify(root, 0, 2, l1, path), "child hash as content");
    }

    function test_gas_verifyDepth12() public {
        bytes32[] memory hs = _hashes(3907);
        bytes32 root = MerkleRef.root(hs);
        bytes32[] memory path = MerkleRef.proof(hs, 1000);
        uint256 before = gasleft();
        bool ok = h.verify(root, 1000, 3907, hs[1000], path);
        uint256 used = before - gasleft();
        vm.assertTrue(ok, "verifies");
        emit log_named_uint("ChunkMerkle.verify, 3907 leaves (12 siblings), gas incl. call", used);
    }
}
