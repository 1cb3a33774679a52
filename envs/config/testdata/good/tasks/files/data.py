print("data")
