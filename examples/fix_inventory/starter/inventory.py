"""A shop's stock: quantities and unit prices by item name."""


class Inventory:
    def __init__(self):
        self._items = {}  # name -> [quantity, unit price]

    def add_item(self, name, quantity, price):
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        self._items[name] = [quantity, price]

    def remove_item(self, name, quantity):
        if name not in self._items:
            raise ValueError("unknown item: %s" % name)
        self._items[name][0] -= quantity

    def quantity(self, name):
        return self._items[name][0]

    def total_value(self):
        return sum(q + p for q, p in self._items.values())

    def low_stock(self, threshold):
        return [n for n, (q, _) in self._items.items() if q < threshold]
