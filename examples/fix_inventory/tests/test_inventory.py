"""Hidden tests for inventory.py."""

import pytest

from inventory import Inventory


def make():
    inv = Inventory()
    inv.add_item("apple", 10, 0.5)
    inv.add_item("pear", 2, 1.25)
    return inv


def test_add_new_item():
    inv = Inventory()
    inv.add_item("fig", 3, 2.0)
    assert inv.quantity("fig") == 3


def test_add_existing_item_accumulates():
    inv = make()
    inv.add_item("apple", 5, 0.5)
    assert inv.quantity("apple") == 15


def test_add_rejects_bad_values():
    inv = Inventory()
    with pytest.raises(ValueError):
        inv.add_item("fig", 0, 1.0)
    with pytest.raises(ValueError):
        inv.add_item("fig", 1, -1.0)


def test_remove_item():
    inv = make()
    inv.remove_item("apple", 4)
    assert inv.quantity("apple") == 6


def test_remove_too_many_raises_and_keeps_stock():
    inv = make()
    with pytest.raises(ValueError):
        inv.remove_item("pear", 3)
    assert inv.quantity("pear") == 2


def test_remove_unknown_raises():
    with pytest.raises(ValueError):
        make().remove_item("kiwi", 1)


def test_remove_to_zero_deletes_item():
    inv = make()
    inv.remove_item("pear", 2)
    assert inv.quantity("pear") == 0
    assert "pear" not in inv.low_stock(100)


def test_quantity_of_unknown_is_zero():
    assert make().quantity("kiwi") == 0


def test_total_value():
    assert make().total_value() == pytest.approx(10 * 0.5 + 2 * 1.25)


def test_low_stock_inclusive_and_sorted():
    inv = make()
    inv.add_item("banana", 2, 0.2)
    assert inv.low_stock(2) == ["banana", "pear"]
