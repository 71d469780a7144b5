// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Vm} from "./Vm.sol";

/// @title TestBase
/// @notice What every Syncline test contract needs: forge's `IS_TEST` marker, the cheatcode
/// handle and a `bound` helper for fuzz inputs.
abstract contract TestBase {
    bool public IS_TEST = true;

    Vm internal constant vm = Vm(address(uint160(uint256(keccak256("hevm cheat code")))));

    /// @dev Maps `x` into [min, max]; values already inside are kept so fuzz edge cases survive.
    function bound(uint256 x, uint256 min, uint256 max) internal pure returns (uint256) {
        require(min <= max, "bound: min > max");
        if (x >= min && x <= max) return x;
        unchecked {
            uint256 size = max - min + 1;
            if (size == 0) return x; // the whole uint256 range
            return min + (x % size);
        }
    }

    /// @dev Number of set bits, the slow obvious way (a reference for the library under test).
    function _popcount(uint256 x) internal pure returns (uint256 n) {
        for (uint256 i = 0; i < 256; ++i) {
            if ((x >> i) & 1 == 1) ++n;
        }
    }

    /// @dev Bits [0, shardCount) set.
    function _fullMask(uint256 shardCount) internal pure returns (uint256) {
        return shardCount == 256 ? type(uint256).max : (uint256(1) << shardCount) - 1;
    }
}
