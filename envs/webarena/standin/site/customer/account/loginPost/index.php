<?php
require __DIR__ . '/../../../db.php';
$stmt = db()->prepare('SELECT id FROM customers WHERE email = ? AND password_sha256 = SHA2(?, 256)');
$stmt->bind_param('ss', $_POST['login']['username'], $_POST['login']['password']);
$stmt->execute();
$row = $stmt->get_result()->fetch_assoc();
session_start();
if ($row === null) { header('Location: /customer/account/login/?failed=1', true, 302); exit; }
session_regenerate_id(true);
$_SESSION['customer_id'] = (int)$row['id'];
header('Location: /customer/account/', true, 302);
